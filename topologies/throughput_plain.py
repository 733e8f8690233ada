"""Keyed-count throughput benchmark, plain streamparse (bench/throughput.py).

spout --fields grouping on key--> counter (1 task)
"""

from __future__ import annotations

from streamparse import Grouping, Topology

from bolts.common import topology_config
from bolts.throughput import PlainCounter
from demos.options import ThroughputOptions
from spouts.throughput import ThroughputSpout


class ThroughputPlain(Topology):
    config = topology_config(ThroughputOptions())

    spout = ThroughputSpout.spec(par=1)
    counter = PlainCounter.spec(inputs={spout: Grouping.fields("key")}, par=1)
