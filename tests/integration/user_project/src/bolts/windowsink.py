from elastorm import Sink


class WindowSink(Sink):
    """Each (word, window start, count) output once into the table windows; a quiet
    line has count -1 and its timer's time as start."""

    schema = "CREATE TABLE IF NOT EXISTS windows (word TEXT, start REAL, count INTEGER, kind TEXT)"
    table = "windows"
    columns = ("word", "start", "count")
