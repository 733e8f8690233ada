from elastorm import KeyedBolt, ValueState, output_id_fields


class CountWords(KeyedBolt):
    outputs = output_id_fields(["word", "count"])
    count = ValueState(default=0)

    def process_keyed(self, key, values):
        n = self.count.value() + 1
        self.count.update(n)
        self.emit([key, n])
