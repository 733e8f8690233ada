from spouts.words import Words


class SlowWords(Words):
    """words() at about 40 a second (some 100 s): time for the controller's first moves,
    a migration by each protocol and a kill while the stream still runs."""

    rate = 40
