"""Fault zones (``elastorm.fault_zones``): several logical nodes that fail together (a
rack, a switch) are one zone, and no key group's checkpoint is held in its owner's
zone, from the start-up holders on through every allocation and recovery, so losing a
whole zone loses no state (Kumbhare et al. 2015, section VII)."""

from __future__ import annotations

import pytest

from elastorm.config import ConfigError, TopologyConfig
from elastorm.controller.loop import Placement, build_view, recovery_view
from elastorm.core.control import MigrationController, initial_holders
from elastorm.core.routing import RoutingTable
from elastorm.storm.elastic import task_zones

TASKS = [10, 11, 12, 13]  # node0..node3
ZONES = {"node1": "rack", "node2": "rack"}


def config(zones: object = ZONES) -> TopologyConfig:
    return TopologyConfig.from_conf({"elastorm.fault_zones": zones})


def test_zones_parse_and_default_to_one_per_node() -> None:
    assert config().fault_zones == ZONES
    assert config('{"node3": "z"}').fault_zones == {"node3": "z"}  # JSON text, as Storm hands it
    assert task_zones(config(), TASKS) == ["node0", "rack", "rack", "node3"]
    assert task_zones(TopologyConfig.from_conf({}), TASKS[:2]) == ["node0", "node1"]


@pytest.mark.parametrize("bad", [["node1"], {"node1": ""}, {"node1": 3}])
def test_a_bad_zone_map_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="elastorm.fault_zones"):
        config(bad)


def test_start_up_holders_leave_the_owners_zone() -> None:
    routing = RoutingTable.round_robin(8, TASKS)
    zones = task_zones(config(), TASKS)
    holders = initial_holders(routing, TASKS, zones)
    zone = dict(zip(TASKS, zones, strict=True))
    assert all(zone[holders[g]] != zone[routing.owner(g)] for g in range(8))
    # Without zones, the next task after the owner, as before.
    assert initial_holders(routing, TASKS) == {g: TASKS[(g + 1) % 4] for g in range(8)}
    # The controller computes the same holders as the tasks do.
    control = MigrationController(num_key_groups=8, tasks=TASKS, emitters=[1], zones=zones)
    assert control.holders == holders
    # One zone for all: the rule cannot hold, a copy is still kept on another task.
    one = initial_holders(routing, TASKS, ["z"] * 4)
    assert all(one[g] != routing.owner(g) for g in range(8))


def test_the_controllers_views_carry_the_zones() -> None:
    zones = config().fault_zones
    assert zones == ZONES
    placement = Placement.by_index({"op": TASKS})
    control = MigrationController(num_key_groups=8, tasks=TASKS, emitters=[1])
    view = build_view([], controls={"op": control}, placement=placement, now=0.0, zones=zones)
    assert [n.fault_zone for n in view.nodes] == ["node:node0", "rack", "rack", "node:node3"]
    lost = recovery_view(control, "op", [11, 12], placement=placement, now=0.0, zones=ZONES)
    assert {n.node_id: n.fault_zone for n in lost.nodes}["node2"] == "rack"
