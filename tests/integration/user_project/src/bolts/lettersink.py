from elastorm import Sink


class LettersSink(Sink):
    """Each (letter, updates, total) output once into the table letters, with its kind."""

    schema = "CREATE TABLE IF NOT EXISTS letters (letter TEXT, updates INT, total INT, kind TEXT)"
    table = "letters"
    columns = ("letter", "updates", "total")
