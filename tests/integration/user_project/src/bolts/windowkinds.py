from bolts.windowcount import WindowCounts, add_one
from elastorm import SessionWindow, Sink, SlidingWindow, WindowState, output_id_fields


def added(a, b):
    return a + b


class WindowKinds(WindowCounts):
    """The windowed count with every window kind: its 5-second tumbling windows and
    quiet timers, plus 5-second windows sliding by 2.5 s and sessions that end 0.25 s
    of event time after a word's last coming. Each row says its window kind."""

    outputs = output_id_fields(["word", "start", "count", "window"])
    sliding = WindowState(SlidingWindow(5, 2.5), add_one, initial=0, fire="on_sliding")
    sessions = WindowState(SessionWindow(0.25), add_one, initial=0, merge=added, fire="on_session")

    def process_keyed(self, key, values):
        super().process_keyed(key, values)
        self.sliding.add(1)
        self.sessions.add(1)

    def on_window(self, key, window, count):
        self.emit([key, window.start, count, "tumbling"])

    def on_sliding(self, key, window, count):
        self.emit([key, window.start, count, "sliding"])

    def on_session(self, key, window, count):
        self.emit([key, window.start, count, "session"])

    def on_timer(self, key, time):
        self.emit([key, time, -1, "quiet"])


class WindowKindSink(Sink):
    """Each (word, window start, count, window kind) output once into the table windows."""

    schema = (
        "CREATE TABLE IF NOT EXISTS windows "
        "(word TEXT, start REAL, count INTEGER, window TEXT, kind TEXT)"
    )
    table = "windows"
    columns = ("word", "start", "count", "window")
