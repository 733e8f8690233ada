import random

from elastorm import GeneratedSpout

VOCABULARY = "storm stream state key group checkpoint migrate elastic python bolt".split()


def words(n=4000, seed=13):
    """The whole stream: n words, the same every time."""
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(n)]


WORDS = words()


class Words(GeneratedSpout):
    """words() at about 50 a second (some 80 s), then nothing. Each tuple is
    [position, word]: word number `position` is the same every time, so elastorm
    can replay the stream from any position after a crash."""

    fields = ["word"]
    rate = 50

    def generate(self, position):
        return [WORDS[position]] if position < len(WORDS) else None
