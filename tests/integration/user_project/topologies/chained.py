from bolts.letters import LetterTotals, first_letter
from bolts.lettersink import LettersSink
from bolts.wordcount import CountWords
from spouts.words import Words
from streamparse import Grouping

from elastorm import ElasticTopology, keyed


class Chained(ElasticTopology):
    config = {
        "elastorm.key_groups": 12,
        "elastorm.checkpoint_interval_secs": 1,
        "elastorm.release_outputs_on_copy": True,  # a running count into a sink
    }
    words = Words.spec()
    counts = CountWords.spec(inputs={words: keyed("word")}, par=2)
    letters = LetterTotals.spec(inputs={counts: keyed(first_letter)}, par=2)
    sink = LettersSink.spec(inputs={letters: Grouping.SHUFFLE})
