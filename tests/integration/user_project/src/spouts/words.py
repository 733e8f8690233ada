import random
import time

from streamparse import Spout

VOCABULARY = "storm stream state key group checkpoint migrate elastic python bolt".split()


def words(n=4000, seed=13):
    """The whole stream: n words, the same every time."""
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(n)]


class Words(Spout):
    """words() at about 100 a second (some 40 s), then nothing."""

    outputs = ["word"]

    def initialize(self, conf, context):
        self.stream = iter(words())

    def next_tuple(self):
        word = next(self.stream, None)
        if word is None:
            time.sleep(0.1)
            return
        time.sleep(0.01)
        self.emit([word])
