"""The wheel built from this repository (``pip wheel . --no-deps``) installs one
top-level package, ``elastorm``: nothing named ``bolts``, ``spouts``, ``tests``... that
would collide with a user's own streamparse project."""

from __future__ import annotations

import zipfile
from pathlib import Path

from wheel_build import build_wheel


def test_wheel_holds_only_the_elastorm_package(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top = sorted({name.split("/")[0] for name in names})
    print("wheel top-level:", top)
    assert top == ["elastorm", "elastorm-0.1.0.dist-info"]
    dist_info = [n for n in names if n.startswith("elastorm-0.1.0.dist-info/")]
    top_level = zipfile.ZipFile(wheel).read("elastorm-0.1.0.dist-info/top_level.txt")
    assert top_level.decode().split() == ["elastorm"], dist_info
    # Nor this repository's demo jobs: their options, schema, references, drivers and
    # harnesses live in the project's src/demos/ and drivers/ (issue 28).
    demo = ("elastorm/examples/", "flights", "_driver.py", "latency_counts", "_control.py")
    assert [n for n in names if any(w in n for w in demo)] == []
    # No tests, data or build output inside the package: Python sources, the
    # Maven poms and Java sources that `elastorm setup` builds in a user's project,
    # and the dashboard's page, script and style.
    other = [n for n in names if n.startswith("elastorm/") and not n.endswith(".py")]
    assert other, "the JVM sources must ship as package data"
    static = [n for n in other if n.startswith("elastorm/dashboard/static/")]
    assert sorted(static) == [
        f"elastorm/dashboard/static/{f}"
        for f in (
            "dashboard.css", "dashboard.js", "index.html",
            "vendor/echarts/LICENSE", "vendor/echarts/LICENSE-d3", "vendor/echarts/NOTICE",
            "vendor/echarts/echarts.min.js",
        )
    ]  # fmt: skip
    for name in set(other) - set(static):
        assert name.startswith("elastorm/jvm/") and name.endswith((".java", "pom.xml")), name
    assert "elastorm/jvm/multilang/pom.xml" in names
    assert "elastorm/jvm/pom.xml" in names
