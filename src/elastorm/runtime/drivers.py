"""A project's drivers: ``drivers/NAME.py`` runs a topology and checks it.

streamparse finds a topology by name as ``topologies/NAME.py`` next to
``config.json``; ``elastorm local NAME`` and ``elastorm run NAME`` find its driver
the same way, as the module ``drivers/NAME.py`` of the project (a package: it has
``drivers/__init__.py``, so drivers may share code). The driver module defines the
entry function::

    def make_driver(args: DriverArgs) -> Driver: ...

which gets the command line's generic arguments (:class:`DriverArgs`) and returns an
:class:`~elastorm.runtime.outcome.Driver`: the options to submit with, when the run
is complete, and its check. The driver's ``name`` is the topology it submits: its
own NAME's, or another topology's for a scenario of it (``drivers/quickstart.py``
runs ``topologies/flights_elastic.py``). The project's directory and its ``src/``
come first on ``sys.path`` while drivers load, so a driver imports the project's
own packages as its components do. A topology without a driver module just runs:
it is submitted, left running for ``--timeout`` seconds (streamparse's ``sparse run
--time``), then killed.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from elastorm.config import Section, TopologyConfig
from elastorm.errors import UserError
from elastorm.runtime.outcome import Driver, Outcome, Progress

TOPOLOGIES_DIR = "topologies"
DRIVERS_DIR = "drivers"
ENTRY = "make_driver"


@dataclass(frozen=True, kw_only=True)
class DriverArgs:
    """The arguments of ``elastorm local/run`` that a driver may use, each as it likes."""

    limit: int | None = None  # how much input to stream (e.g. rows, numbers)
    strategy: str = "correlated"  # the controller's checkpoint allocation


def _names(folder: Path) -> list[str]:
    """The module names of the ``.py`` files of ``folder`` (none starting with ``_``)."""
    if not folder.is_dir():
        return []
    return sorted(
        p.stem for p in folder.glob("*.py") if p.stem.isidentifier() and not p.stem.startswith("_")
    )


def topology_names(project: Path) -> list[str]:
    """Every topology of the project (``topologies/*.py``)."""
    return _names(project / TOPOLOGIES_DIR)


def driver_names(project: Path) -> list[str]:
    """Every driver module of the project (``drivers/NAME.py``)."""
    return _names(project / DRIVERS_DIR)


def load_driver(project: Path, name: str, args: DriverArgs) -> Driver:
    """``drivers/<name>.py``'s driver, or a timed run of ``topologies/<name>.py``.

    Raises ``UserError`` naming what exists for a name that is neither, and for a
    driver module without the entry function.
    """
    drivers = driver_names(project)
    if name not in drivers:
        topologies = topology_names(project)
        if name in topologies:
            return TimedRun(name)
        raise UserError(
            f"no topology {name!r} in {project / TOPOLOGIES_DIR}; have: "
            f"{', '.join(topologies) or 'none'}"
            + (f" (with a driver in {DRIVERS_DIR}/: {', '.join(drivers)})" if drivers else "")
        )
    module = import_driver_module(project, name)
    make = getattr(module, ENTRY, None)
    if not callable(make):
        raise UserError(f"{module.__file__} defines no {ENTRY}(args: DriverArgs) -> Driver")
    return make(args)


def import_driver_module(project: Path, name: str):
    """Import ``drivers.<name>`` of ``project``, with the project and its ``src/`` first
    on ``sys.path`` (how streamparse's components see the project)."""
    for path in (project / "src", project):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    return importlib.import_module(f"{DRIVERS_DIR}.{name}")


def project_sections(project: Path) -> list[type[Section]]:
    """The option sections the project's drivers declare, in the order first met
    (``elastorm options --jobs``)."""
    found: list[type[Section]] = []
    for name in driver_names(project):
        driver = load_driver(project, name, DriverArgs())
        found.extend(s for s in driver.sections if s not in found)
    return found


class TimedRun:
    """A topology without a driver: runs ``timeout`` seconds, then counts as done."""

    topology: str = ""  # set by runtime.run before submitting
    zk_hosts: str = ""
    sections: tuple[type[Section], ...] = ()

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds = 0.0

    def options(self, output_dir: str) -> dict[str, object]:
        return TopologyConfig.overrides(output_dir=output_dir)

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        started = time.monotonic()
        while self.seconds < timeout:
            progress(f"{self.name}: {self.seconds:.0f} of {timeout:.0f} s (no driver to wait for)")
            time.sleep(min(1.0, timeout - self.seconds))
            self.seconds = time.monotonic() - started

    def outcome(self, output_dir: str) -> Outcome:
        return Outcome(
            summary=f"{self.name} ran {self.seconds:.0f} s; nothing checked "
            f"(write {DRIVERS_DIR}/{self.name}.py with {ENTRY}() to check a run)",
            ok=True,
            facts={},
        )
