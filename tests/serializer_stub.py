"""A pystorm serializer stand-in for the adapters' unit tests."""

from __future__ import annotations

import os


class Pipe:
    """A pystorm serializer stand-in: records what is sent; reads from a real pipe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.input_stream = os.fdopen(self.read_fd, "rb", buffering=0)
        self.output_stream = None
        self.sent: list[dict] = []

    def send_message(self, msg: dict) -> None:
        self.sent.append(msg)

    def read_message(self) -> str:
        return "message"  # what arrived; the flush decision looks at the OS pipe only

    def serialize_dict(self, msg: dict) -> str:
        return repr(msg)
