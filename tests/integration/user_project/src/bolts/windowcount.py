from elastorm import KeyedBolt, TumblingWindow, ValueState, WindowState, output_id_fields

QUIET = 0.3  # seconds of event time without the word


def add_one(count, _):
    return count + 1


class WindowCounts(KeyedBolt):
    """Per word: how often it came in each 5-second window of event time, and a
    ("quiet") line when it did not come for QUIET seconds. Event time is the word's
    position in the stream / 100 (100 words to a second of event time)."""

    outputs = output_id_fields(["word", "start", "count"])
    per_window = WindowState(TumblingWindow(5), add_one, initial=0)
    last_seen = ValueState(ttl=10)

    def event_time(self, key, values):
        return values[0] / 100

    def process_keyed(self, key, values):
        self.per_window.add(1)
        last = self.last_seen.value()
        if last is not None:
            self.timers.delete_event_time(last + QUIET)
        self.last_seen.update(self.timers.now)
        self.timers.register_event_time(self.timers.now + QUIET)

    def on_window(self, key, window, count):
        self.emit([key, window.start, count])

    def on_timer(self, key, time):
        self.emit([key, time, -1])  # quiet since time - QUIET
