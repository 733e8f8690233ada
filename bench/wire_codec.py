"""Python-side cost of the multilang codecs: JSON (stdlib, simplejson as pystorm uses
it) against msgpack, for one tuple message and for a batch of 100.

Usage::

    python bench/wire_codec.py      # any Python with simplejson and msgpack installed

msgpack is not an elastorm dependency: run this in a throw-away virtualenv
(``python3 -m venv /tmp/mp && /tmp/mp/bin/pip install msgpack simplejson``). The
message shapes are those of ``elastorm.storm.wire``: a bolt's input tuple carrying
a ``Data`` list, and an emit. Best of 3 repeats, microseconds per call.
"""

from __future__ import annotations

import json
import timeit

import msgpack
import simplejson

DATA = [[3, "router:5", 123456, "k17", ["k17", 1764000000.123456], 1764000000.1234567], 5]
TUPLE = {"id": "-6955786537413359385", "comp": "router", "stream": "elastorm", "task": 5}
TUPLE["tuple"] = DATA
EMIT = {"command": "emit", "tuple": DATA, "stream": "elastorm", "task": 7, "need_task_ids": False}
CASES = {
    "one tuple in": TUPLE,
    "batch of 100 in": {"command": "batch", "batch": [TUPLE] * 100},
    "batch of 100 out": {"command": "batch", "batch": [EMIT] * 100},
}


def best(fn, n: int) -> float:
    return min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6


def main() -> None:
    for name, obj in CASES.items():
        text, packed = json.dumps(obj), msgpack.packb(obj)
        n = 2000 if "batch" in name else 100_000
        costs = {
            "json.dumps": best(lambda o=obj: json.dumps(o), n),
            "simplejson.dumps": best(lambda o=obj: simplejson.dumps(o), n),
            "msgpack.packb": best(lambda o=obj: msgpack.packb(o), n),
            "json.loads": best(lambda t=text: json.loads(t), n),
            "simplejson.loads": best(lambda t=text: simplejson.loads(t), n),
            "msgpack.unpackb": best(lambda p=packed: msgpack.unpackb(p), n),
        }
        print(
            f"{name}: {len(text)} bytes JSON, {len(packed)} msgpack; "
            + ", ".join(f"{k} {v:.2f} us" for k, v in costs.items())
        )


if __name__ == "__main__":
    main()
