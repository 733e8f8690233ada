from bolts.sink import CountsSink
from bolts.wordcount import CountWords
from spouts.words import Words
from streamparse import Grouping

from elastorm import ElasticTopology, keyed


class WordCount(ElasticTopology):
    config = {"elastorm.key_groups": 12, "elastorm.checkpoint_interval_secs": 1}
    words = Words.spec()
    counts = CountWords.spec(inputs={words: keyed("word")}, par=2)
    sink = CountsSink.spec(inputs={counts: Grouping.SHUFFLE})
