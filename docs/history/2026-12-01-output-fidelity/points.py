# ruff: noqa: E501  (table-printing lines of a one-off analysis)
"""Candidate experiment points: predicted OF on the controller's (full) graph and on the
aligned (co-partitioned) graph, for forced plans.  Equal key-group rates."""

import itertools

from elastorm.replication.model import InputKind, Operator, Stream, TaskGraph, output_fidelity


def build(nodes, groups=20):
    own = {n: [g for g in range(groups) if g % nodes == n] for n in range(nodes)}
    rate = {n: len(v) / groups for n, v in own.items()}
    J, W = (lambda n: f"j{n}"), (lambda n: f"w{n}")
    ops = (
        Operator(name="spout", tasks=("spout",)),
        Operator(name="join", tasks=tuple(J(n) for n in own), kind=InputKind.CORRELATED),
        Operator(name="win", tasks=tuple(W(n) for n in own)),
    )
    src = tuple(Stream(source="spout", target=J(n), rate=rate[n]) for n in own)
    full = TaskGraph(
        operators=ops,
        streams=src
        + tuple(Stream(source=J(u), target=W(t), rate=rate[t] * rate[u]) for t in own for u in own),
    )
    al = TaskGraph(
        operators=ops,
        streams=src + tuple(Stream(source=J(n), target=W(n), rate=rate[n]) for n in own),
    )
    return full, al


for nodes, lose in ((3, 1), (3, 2), (4, 2), (4, 3)):
    full, al = build(nodes)
    victims = [f"{k}{n}" for n in range(1, lose + 1) for k in "jw"]
    print(
        f"\n{nodes} nodes, nodes 1..{lose} lost; plan -> OF full (controller) / aligned (runtime)"
    )
    seen = {}
    for k in range(0, len(victims) + 1):
        for plan in itertools.combinations(victims, k):
            failed = set(victims) - set(plan)
            key = (round(output_fidelity(full, failed), 3), round(output_fidelity(al, failed), 3))
            seen.setdefault(key, plan)
    for (f, a), plan in sorted(seen.items(), key=lambda x: (x[0][1], x[0][0])):
        print(
            f"   {str(list(plan)):<34} full {f:.3f}  aligned {a:.3f}  {'<-- models disagree' if abs(f - a) > 0.1 else ''}"
        )
