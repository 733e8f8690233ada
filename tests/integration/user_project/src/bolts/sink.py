from elastorm import Sink


class CountsSink(Sink):
    """Each (word, count) output once into the table counts, with its kind."""

    schema = "CREATE TABLE IF NOT EXISTS counts (word TEXT, count INTEGER, kind TEXT)"
    table = "counts"
    columns = ("word", "count")
