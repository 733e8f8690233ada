"""Smoke topology: a spout emitting on a direct stream to two counter tasks."""

from streamparse import Grouping, Topology

from bolts.smoke import CounterBolt
from demos.options import SmokeOptions
from spouts.smoke import NumberSpout


class SmokeTopology(Topology):
    config = SmokeOptions().to_conf()  # checked here, at submit
    numbers = NumberSpout.spec(name="numbers")
    counter = CounterBolt.spec(name="counter", inputs={numbers: Grouping.DIRECT}, par=2)
