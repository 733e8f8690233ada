"""What a driver is to ``elastorm.runtime.run``: options to submit, a wait, an ``Outcome``.

A project's drivers (``drivers/NAME.py``, found by ``elastorm.runtime.drivers``) and
its harnesses implement :class:`Driver`; ``run_topology`` does the rest (jar, cluster,
submit, wait, kill) the same way for every topology.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from elastorm.config import Section

#: Called with one progress line while a driver waits for its run to finish.
Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a finished run printed and whether its check passed."""

    summary: str
    ok: bool
    facts: dict[str, Any]


class Driver(Protocol):
    """Runs one topology of ``topologies/`` and checks what it did."""

    name: str  # the topology: topologies/<name>.py
    topology: str  # the submitted name, set by run_topology (a resubmitting driver renames)
    zk_hosts: str  # the cluster's ZooKeeper (a local one, or an ensemble), set by run_topology
    #: The option sections (besides TopologyConfig) that ``options`` may set: every
    #: ``elastorm.*`` key is checked against them before anything is submitted.
    sections: tuple[type[Section], ...]

    def options(self, output_dir: str) -> dict[str, object]:
        """The topology options to submit with (``sparse submit -o``)."""
        ...

    def wait(self, output_dir: str, timeout: float, progress: Progress) -> None:
        """Return once the run is complete; raise ``UserError`` after ``timeout`` s."""
        ...

    def outcome(self, output_dir: str) -> Outcome:
        """What the run did, checked."""
        ...
