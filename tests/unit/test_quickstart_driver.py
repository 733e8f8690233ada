"""The quickstart's driver (``drivers/quickstart.py``): which keyed task it may kill,
and what it tells the newcomer (no servers involved)."""

from __future__ import annotations

from drivers.quickstart import QuickstartDriver, _victim


def _status(owners: list[int], holders: list[int], newest: list[bool]) -> dict:
    return {"owners": owners, "holders": holders, "assisted": newest, "moving": []}


def test_the_victim_is_an_owner_whose_every_group_has_its_newest_checkpoint_elsewhere() -> None:
    # task 4's group 1 has no newest checkpoint yet: killing 4 could lose state
    status = _status([4, 4, 5, 6], [5, 6, 6, 4], [True, False, True, True])
    assert _victim(status) == 5
    assert _victim(_status([4, 5], [5, 4], [False, False])) is None
    assert _victim(_status([4, 5], [4, 5], [True, True])) is None  # held by the owner itself


def test_the_story_says_what_moved_what_died_and_how_the_check_went() -> None:
    driver = QuickstartDriver()
    driver.migrations = [
        {"group": 3, "used": "cpal", "asked": "cpal", "state": "done", "source": 4,
         "target": 5, "ms": 364, "pause_ms": 93.6, "detail": ""},
        {"group": None, "used": "kill", "asked": "kill -9 of task 4", "state": "restored"},
    ]  # fmt: skip
    driver.kill = {
        "task": 4, "pid": 99, "groups": [0, 6], "holders": [5], "rows_read": 134_710,
        "waited": 0.2, "detected": 0.05, "restored": 0.55, "loadavg_1m": 1.5,
    }  # fmt: skip
    story = driver.story(ok=True)
    assert "key group 3 moved live from task 4 to task 5" in story
    assert "by CPAL in 364 ms" in story and "waited 93.6 ms at the target" in story
    assert "At 40% of the input, kill -9 of keyed task 4's Python process (pid 99)" in story
    assert "restored all 2 groups on task(s) [5]" in story and "0.55 s after it" in story
    assert "equal pandas' exactly" in story and "declared lost too" not in story
    driver.also_lost = [13]
    assert "Keyed task(s) [13] were declared lost too" in driver.story(ok=True)
    assert "do NOT all equal pandas'" in driver.story(ok=False)
