from bolts.windowcount import WindowCounts
from bolts.windowsink import WindowSink
from spouts.words import Words
from streamparse import Grouping

from elastorm import ElasticTopology, keyed


class WindowCount(ElasticTopology):
    config = {"elastorm.key_groups": 12, "elastorm.checkpoint_interval_secs": 1}
    words = Words.spec()
    counts = WindowCounts.spec(inputs={words: keyed("word")}, par=2)
    sink = WindowSink.spec(inputs={counts: Grouping.SHUFFLE})
