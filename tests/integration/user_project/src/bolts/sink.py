from streamparse import Bolt


class Sink(Bolt):
    """Appends "word count" lines to the file that the option wordcount.output names."""

    def initialize(self, conf, context):
        self.out = open(conf["wordcount.output"], "a", buffering=1)

    def process(self, tup):
        word, count = tup.values
        self.out.write(f"{word} {count}\n")
