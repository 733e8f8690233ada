"""Test-wide settings."""

import pytest
from hypothesis import settings

# The CI machines are shared and noisy (2 cores): a per-example deadline would make
# property tests fail on load, not on bugs. Each test still sets its own example count.
settings.register_profile("elastorm", deadline=None)
settings.load_profile("elastorm")


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (the chaos scenarios: minutes each)",
    )


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run only with ``--slow``: CI's ``bin/test`` and ``-m``
    selections leave them out, whatever else they select."""
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def emitter_first_start():
    """Emitters start without ZooKeeper: every ``emitter_start`` is a first start
    (module-scoped, so Hypothesis tests in the module may use it)."""
    import elastorm.zk.replay
    from elastorm.zk.replay import EmitterStart

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            elastorm.zk.replay,
            "emitter_start",
            lambda *a: EmitterStart(incarnation=1, routing={}, point=None),
        )
        yield
