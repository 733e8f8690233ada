"""Per-call cost of ``KeyedEmitting.emit_keyed`` (no Storm): the hold-back's check on
the hot path. Run with PYTHONPATH at main's src, then at this branch's, alternately.
(Reformatted for ruff after the run of emit_cost_holdback.txt; same statements.)"""

import sys
import time

from elastorm.storm.elastic import KeyedEmitting

CONTEXT = {
    "taskid": 1,
    "componentid": "router",
    "task->component": {"1": "router", "20": "op", "21": "op"},
}
CONF = {"elastorm.key_groups": 20, "elastorm.operators": {"op": ["router"]}}


class R(KeyedEmitting):
    def __init__(self):
        pass

    def send(self, a):
        pass


r = R()
keys = [f"k{i}" for i in range(1000)]
best = []
for _ in range(5):
    r.setup_emitting({**CONF, "elastorm.max_buffered": 10**9}, CONTEXT)  # never at the bound
    t = time.thread_time()
    for i in range(100_000):
        r.emit_keyed(keys[i % 1000], i, 0.0)
    best.append((time.thread_time() - t) / 100_000 * 1e6)
print(
    sys.argv[1],
    "us per emit_keyed (thread CPU), best/median of 5:",
    round(min(best), 3),
    round(sorted(best)[2], 3),
)
