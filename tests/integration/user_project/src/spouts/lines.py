from elastorm import LinesSpout


class WordLines(LinesSpout):
    """One word per line, from the file or directory that the option wordcount.input
    names; each tuple is [position, word], position = the file and the line's offset."""

    fields = ["word"]
    path_option = "wordcount.input"
