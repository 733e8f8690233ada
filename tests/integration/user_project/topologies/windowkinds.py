from bolts.windowkinds import WindowKinds, WindowKindSink
from spouts.words import Words
from streamparse import Grouping

from elastorm import ElasticTopology, keyed


class WindowKindsTopology(ElasticTopology):
    config = {"elastorm.key_groups": 12, "elastorm.checkpoint_interval_secs": 1}
    words = Words.spec()
    counts = WindowKinds.spec(inputs={words: keyed("word")}, par=2)
    sink = WindowKindSink.spec(inputs={counts: Grouping.SHUFFLE})
