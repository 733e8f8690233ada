"""The typed topology configuration (``elastorm.config``): defaults, checks, round trip,
the submit-time check and the README's generated table."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from demos.options import (
    EXAMPLE_SECTIONS,
    FlightsOptions,
    ShiftOptions,
    SyntheticOptions,
)
from elastorm.config import (
    ConfigError,
    ControllerConfig,
    ProjectConfig,
    Section,
    TopologyConfig,
    check_conf,
)
from elastorm.controller.adaptation import Thresholds
from elastorm.controller.loop import loop_thresholds

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults() -> None:
    c = TopologyConfig()
    assert (c.key_groups, c.checkpoint_interval_secs, c.migration_timeout_secs) == (20, 5.0, 60.0)
    assert c.heartbeats and c.output_dir is None and c.zookeeper_hosts is None
    assert c.initial_nodes == {} and c.external_load == {}
    # Without controller options the controller only carries out requests.
    assert c.controller.strategy == "none" and not c.controller.adapt
    assert not c.controller.active
    assert TopologyConfig.from_conf({}) == c


def test_the_loop_has_one_set_of_defaults() -> None:
    assert loop_thresholds(ControllerConfig()) == Thresholds()
    c, t = ControllerConfig(), Thresholds()
    assert (c.cpu_high, c.cpu_low, c.queue_high, c.queue_low) == (
        t.cpu_high,
        t.cpu_low,
        t.queue_high,
        t.queue_low,
    )
    assert (c.cooldown_secs, c.max_moves, c.scale_in) == (t.cooldown, t.max_moves, t.scale_in)


def test_strings_from_sparse_o_are_parsed() -> None:
    c = TopologyConfig.from_conf(
        {
            "elastorm.key_groups": "8",
            "elastorm.checkpoint_interval_secs": "0",
            "elastorm.heartbeats": "false",
            "elastorm.controller.adapt": "true",
            "elastorm.controller.queue_high": "80",
        }
    )
    assert c.key_groups == 8 and c.checkpoint_interval_secs == 0.0 and not c.heartbeats
    assert c.controller.adapt and c.controller.queue_high == 80.0


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"elastorm.key_groups": "many"}, "elastorm.key_groups = 'many': expected an integer >= 1"),
        ({"elastorm.key_groups": 0}, "elastorm.key_groups = 0: expected an integer >= 1"),
        ({"elastorm.key_groups": 2.5}, "elastorm.key_groups = 2.5: expected an integer"),
        ({"elastorm.key_groups": True}, "elastorm.key_groups = True: expected an integer"),
        (
            {"elastorm.checkpoint_interval_secs": -1},
            "elastorm.checkpoint_interval_secs = -1: expected a number >= 0",
        ),
        (
            {"elastorm.migration_timeout_secs": 0},
            "elastorm.migration_timeout_secs = 0: expected a number > 0",
        ),
        ({"elastorm.migration_timeout_secs": "nan"}, "migration_timeout_secs = 'nan'"),
        ({"elastorm.heartbeats": "yes"}, "elastorm.heartbeats = 'yes': expected true/false"),
        ({"elastorm.initial_nodes": {"op2": []}}, r"elastorm.initial_nodes = \{'op2': \[\]\}"),
        ({"elastorm.initial_nodes": {"op2": [-1]}}, "node index >= 0"),
        ({"elastorm.initial_nodes": {"op2": "0"}}, "elastorm.initial_nodes"),
        ({"elastorm.initial_nodes": [1]}, "elastorm.initial_nodes = \\[1\\]"),
        ({"elastorm.external_load": {"node0": 1.5}}, r"share in \[0, 1\)"),
        ({"elastorm.external_load": [1]}, "elastorm.external_load"),
        ({"elastorm.output_dir": 3}, "elastorm.output_dir = 3: expected a string"),
        ({"elastorm.zookeeper.hosts": ["a"]}, "elastorm.zookeeper.hosts"),
        (
            {"elastorm.controller.strategy": "random"},
            "elastorm.controller.strategy = 'random': expected one of none|baseline",
        ),
        ({"elastorm.controller.window": 1}, "elastorm.controller.window = 1: expected"),
        ({"elastorm.controller.cpu_high": 1.5}, r"cpu_high = 1.5: expected a number in \[0, 1\]"),
        ({"elastorm.controller.reallocate_secs": 0}, "reallocate_secs = 0: expected a number > 0"),
        ({"elastorm.controller.cpu_low": 0.9}, "cpu_low = 0.9: expected < .*cpu_high"),
        ({"elastorm.controller.queue_low": 200}, "queue_low = 200.0: expected < .*queue_high"),
    ],
)
def test_every_check_names_key_value_and_what_is_allowed(conf, message) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        TopologyConfig.from_conf(conf)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):  # the same at submit
        check_conf(conf, *EXAMPLE_SECTIONS)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigError, match="elastorm.key_groups = -1"):
        TopologyConfig(key_groups=-1)
    with pytest.raises(ConfigError, match="elastorm.shift.rate = -5"):
        ShiftOptions(rate=-5)
    with pytest.raises(TypeError):
        TopologyConfig(20)  # keyword-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        TopologyConfig().key_groups = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("elastorm.key_group", "elastorm.key_groups"),
        ("elastorm.controller.adpat", "elastorm.controller.adapt"),
        ("elastorm.controler.adapt", "elastorm.controller.adapt"),
        ("elastorm.flights.limt", "elastorm.flights.limit"),
        ("elastorm.synthetic.hot_shares", "elastorm.synthetic.hot_share"),
    ],
)
def test_unknown_keys_fail_at_submit_with_a_suggestion(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown option {key}; did you mean {suggestion}\\?"):
        check_conf({key: 1}, *EXAMPLE_SECTIONS)


def test_unknown_key_without_a_close_match() -> None:
    with pytest.raises(ConfigError) as err:
        check_conf({"elastorm.zzz.qqq": 1})
    assert str(err.value) == "unknown option elastorm.zzz.qqq"


def test_components_are_strict_in_their_own_namespaces_only() -> None:
    # A worker parses elastorm's options and its job's: other jobs' keys are not its concern.
    conf = {"elastorm.shift.work_us": 10, "elastorm.flights.batch": 5, "storm.x": 1}
    assert TopologyConfig.from_conf(conf) == TopologyConfig()
    assert FlightsOptions.from_conf(conf).batch == 5
    for section, key in [
        (TopologyConfig, "elastorm.key_group"),  # any elastorm.<name> is elastorm's own
        (TopologyConfig, "elastorm.controller.adpat"),
        (TopologyConfig, "elastorm.zookeeper.host"),
        (FlightsOptions, "elastorm.sink.write_evry"),
        (SyntheticOptions, "elastorm.synthetic.rte"),
    ]:
        with pytest.raises(ConfigError, match=f"unknown option {re.escape(key)}"):
            section.from_conf({key: 1})
    with pytest.raises(ConfigError, match="unknown option elastorm.flights.x"):
        check_conf({"elastorm.flights.x": 1})  # no sections given: example keys are unknown


def test_round_trip() -> None:
    config = TopologyConfig(
        key_groups=16,
        checkpoint_interval_secs=2,
        initial_nodes={"op2": [0, 1], "op4": [3]},
        external_load={"node0": 0.8},
        heartbeats=False,
        output_dir="/tmp/out",
        zookeeper_hosts="127.0.0.1:2181",
        controller=ControllerConfig(
            strategy="correlated", adapt=True, correlation_artifact="a.npz", prior_weight=3
        ),
    )
    conf = config.to_conf()
    assert conf["elastorm.initial_nodes"] == {"op2": [0, 1], "op4": [3]}  # JSON-ready
    assert TopologyConfig.from_conf(conf) == config
    assert TopologyConfig.from_conf(TopologyConfig().to_conf()) == TopologyConfig()
    assert "elastorm.output_dir" not in TopologyConfig().to_conf()  # unset stays unset
    for section in EXAMPLE_SECTIONS:
        assert section.from_conf(section().to_conf()) == section()
    assert check_conf(conf | FlightsOptions(limit=10).to_conf(), *EXAMPLE_SECTIONS)


def test_changed_only() -> None:
    conf = TopologyConfig(key_groups=8, controller=ControllerConfig(adapt=True)).to_conf(
        changed_only=True
    )
    assert conf == {"elastorm.key_groups": 8, "elastorm.controller.adapt": True}


def test_loop_thresholds_from_config() -> None:
    c = TopologyConfig.from_conf(
        {
            "elastorm.controller.adapt": True,
            "elastorm.controller.strategy": "even",
            "elastorm.controller.warmup_secs": 7,
            "elastorm.controller.cooldown_secs": 9,
            "elastorm.controller.queue_low": "5",
        }
    ).controller
    assert c.active and c.strategy == "even" and c.warmup_secs == 7.0
    t = loop_thresholds(c)
    assert (t.cooldown, t.queue_low) == (9.0, 5.0) and t.queue_high == c.queue_high
    assert c.slack == math.inf and ControllerConfig(epsilon=0.2).slack == 0.2


def test_every_option_is_declared_once() -> None:
    keys = [o.key for s in (TopologyConfig, *EXAMPLE_SECTIONS) for o in s.options()]
    assert len(keys) == len(set(keys))
    assert all(k.startswith("elastorm.") for k in keys)
    assert all(o.doc for s in (TopologyConfig, *EXAMPLE_SECTIONS) for o in s.options())


def readme_table(name: str) -> str:
    """The README's generated table between ``<!-- name: begin -->`` and its end."""
    text = README.read_text()
    begin, end = f"<!-- {name}: begin -->\n", f"<!-- {name}: end -->"
    assert begin in text and end in text
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_readme_table_is_what_elastorm_options_prints(capsys) -> None:
    from elastorm.runtime.cli import main

    assert main(["options", "--examples"]) == 0
    assert capsys.readouterr().out == readme_table("options-table")
    assert main(["options"]) == 0
    own = capsys.readouterr().out
    assert "elastorm.key_groups" in own and "elastorm.flights." not in own


def test_readme_config_json_table_is_what_elastorm_options_project_prints(capsys) -> None:
    """config.json's ``elastorm`` section is declared like the topology's options, and
    documented the same way; its keys never belong in a topology conf."""
    from elastorm.runtime.cli import main

    assert main(["options", "--project"]) == 0
    assert capsys.readouterr().out == readme_table("project-options-table")
    assert ProjectConfig not in Section.registry
    with pytest.raises(ConfigError, match="unknown option elastorm.zookeeper_port"):
        check_conf({"elastorm.zookeeper_port": 2181})
    assert ProjectConfig.from_section({"home": "/srv/e"}).home == Path("/srv/e")
    with pytest.raises(ConfigError, match="did you mean elastorm.worker_heap_mb"):
        ProjectConfig.from_section({"worker_heap": 256})


def test_flights_topology_config_is_checked_when_loaded(monkeypatch) -> None:
    from bolts.common import flights_topology_config

    monkeypatch.setenv("ELASTORM_FLIGHTS_LIMIT", "ten")
    with pytest.raises(ConfigError, match="elastorm.flights.limit = 'ten'"):
        flights_topology_config()
    monkeypatch.setenv("ELASTORM_FLIGHTS_LIMIT", "25")
    monkeypatch.setenv("ELASTORM_OUTPUT_DIR", "/tmp/x")
    conf = flights_topology_config(key_groups=4)
    assert conf["elastorm.flights.limit"] == 25 and conf["elastorm.key_groups"] == 4
    assert conf["topology.tick.tuple.freq.secs"] == 1


def test_drivers_options_are_checked_before_submit() -> None:
    from elastorm.errors import UserError
    from elastorm.runtime.run import checked_options

    limit = {"elastorm.flights.limit": 5}
    assert checked_options(limit, EXAMPLE_SECTIONS) == limit
    with pytest.raises(UserError, match="elastorm.flights.limit"):
        checked_options(limit)  # a section the driver did not declare
    with pytest.raises(UserError, match="elastorm.key_groups = 0"):
        checked_options({"elastorm.key_groups": 0})
    with pytest.raises(UserError, match="did you mean elastorm.controller.strategy"):
        checked_options({"elastorm.controller.stratgy": "even"})
