from elastorm import KeyedBolt, ValueState, output_id_fields


def first_letter(values):
    """Stage 2's key: the first letter of the word in a (word, count, ...) output."""
    return values[0][0]


class LetterTotals(KeyedBolt):
    """Per first letter, the updates received from the word counts and the sum of
    their counts: neither is idempotent (an update applied twice counts twice)."""

    outputs = output_id_fields(["letter", "updates", "total"])
    updates = ValueState(default=0)
    total = ValueState(default=0)

    def process_keyed(self, key, values):
        n = self.updates.value() + 1
        self.updates.update(n)
        self.total.update(self.total.value() + values[1])
        self.emit([key, n, self.total.value()])
