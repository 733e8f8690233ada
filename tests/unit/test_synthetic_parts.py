"""The synthetic benchmark's pieces: keys, pacing, latency buckets, checkpoint plan, analysis."""

from __future__ import annotations

import pytest

from bolts.synthetic import CheckpointPlan, LatencyBuckets, add_count, message_type
from drivers.synthetic import Step, merge_buckets, pause_of
from elastorm.core.keygroups import key_group
from spouts.synthetic import KeySpace, Pacer, key_in_group


def test_keyspace_puts_hot_keys_in_the_hot_group_and_cold_keys_elsewhere():
    space = KeySpace(hot_group=7, num_groups=20, cold_keys=200)
    hot = space.ensure(500)
    assert len(set(hot)) == 500 and all(key_group(k, 20) == 7 for k in hot)
    assert len(set(space.cold)) == 200 and all(key_group(k, 20) != 7 for k in space.cold)
    assert {key_group(k, 20) for k in space.cold} == set(range(20)) - {7}
    assert KeySpace(7, 20, 200).ensure(500) == hot  # deterministic
    assert space.ensure(10) is hot and len(hot) == 500  # never shrinks


def test_key_in_group_rejects_nothing_and_bad_hot_group_raises():
    assert key_group(key_in_group("x", 3, 4, 5), 5) == 4
    with pytest.raises(ValueError):
        KeySpace(hot_group=20, num_groups=20, cold_keys=1)


def test_pacer_holds_the_rate_and_restarts_on_reset():
    pacer = Pacer(100.0, now=10.0)
    assert pacer.due(10.0) == 0
    assert pacer.due(10.5) == 50
    pacer.sent += 50
    assert pacer.due(10.5) == 0 and pacer.due(11.0) == 50
    pacer.reset(10.0, now=11.0)
    assert pacer.due(12.0) == 10
    assert Pacer(0.0, now=0.0).due(100.0) == 0


def test_latency_buckets_keep_max_count_sum_and_drain_only_closed_buckets():
    b = LatencyBuckets(width=0.1)
    b.add(100.01, 0.010, 0.002)
    b.add(100.05, 0.030, 0.001)
    b.add(100.12, 0.005, 0.004)
    assert b.drain(100.15) == [[1000, 30.0, 2, 40.0, 2.0, 3.0]]
    assert b.drain(100.15) == []
    assert b.drain(100.3) == [[1001, 5.0, 1, 5.0, 4.0, 4.0]]


def test_checkpoint_plan_hot_group_only_when_first_owned_or_asked():
    plan = CheckpointPlan(hot=7, interval=5.0)
    assert plan.due(0.0, [1, 7], requested=0) == [1, 7]
    assert plan.due(3.0, [1, 7], requested=0) == []
    assert plan.due(5.0, [1, 7], requested=0) == [1]  # cold group on its interval
    assert plan.due(6.0, [1, 7], requested=1) == [7]
    assert plan.due(7.0, [1, 7], requested=1) == []
    # A request seen while not owning the group is not served later.
    plan2 = CheckpointPlan(hot=7, interval=0.0)
    assert plan2.due(0.0, [7], requested=0) == [7]
    assert plan2.due(1.0, [], requested=3) == []
    assert plan2.due(2.0, [7, 2], requested=3) == [2]
    assert plan2.due(9.0, [7, 2], requested=3) == []  # interval 0: cold once only


def test_add_count_and_message_type():
    assert add_count(None, [1, 5.0]) == 1 and add_count(4, [1, 5.0]) == 5
    assert message_type('{"type":"ToState","key_group":7}') == "ToState"
    assert message_type("garbage") == "?"


def test_merge_buckets_and_pause():
    rows = [[100, 10.0, 2, 16.0, 2.0, 3.0], [100, 12.0, 1, 12.0, 1.0, 1.0]]
    rows += [[105, 300.0, 1, 300.0, 20.0, 20.0]]
    rows += [[b, 9.0, 1, 8.0, 2.0, 1.0] for b in range(60, 100)]
    merged = merge_buckets(rows)
    assert merged[100] == [12.0, 3, 28.0, 2.0, 4.0]
    got = pause_of(merged, started=10.2, end=10.6, before=5.0)
    assert got["baseline_ms"] == 8.0
    assert got["window_max_ms"] == 300.0 and got["pause_ms"] == 292.0
    assert got["hop_baseline_ms"] == 1.0 and got["hop_pause_ms"] == 19.0
    assert got["outputs"] == 1
    shorter = pause_of(merged, started=10.2, end=10.4, before=5.0)  # bucket 105 left out
    assert shorter["window_max_ms"] is None and shorter["outputs"] == 0
    empty = pause_of({}, started=1.0, end=2.0)
    assert empty["pause_ms"] is None and empty["hop_pause_ms"] is None and empty["outputs"] == 0


def test_step_validates_kind_and_protocol():
    with pytest.raises(ValueError):
        Step(kind="nap")
    with pytest.raises(ValueError):
        Step(kind="migrate", protocol="teleport")
    assert Step(kind="migrate", protocol="cpal", replay=5).replay == 5


def _spout(tmp_path, clock, **conf):
    from bolts.pipeline import make
    from spouts.synthetic import SyntheticSpout

    base = {"elastorm.output_dir": str(tmp_path), "elastorm.synthetic.cold_keys": 50}
    spout = make(SyntheticSpout, base | conf, task=3, component="generator", clock=clock)
    spout.sleep = lambda _s: None
    return spout


def test_spout_preloads_each_hot_key_once_then_holds_the_steady_mix(tmp_path):
    from bolts.pipeline import FakeClock, drain

    clock = FakeClock()
    conf = {
        "elastorm.synthetic.keys": 300,
        "elastorm.synthetic.preload_rate": 1000.0,
        "elastorm.synthetic.rate": 200.0,
        "elastorm.synthetic.hot_share": 0.5,
    }
    spout = _spout(tmp_path, clock, **conf)
    keys = []
    for _ in range(31):  # 0.31 s at 1000/s: the 300 preload keys, then it stops
        clock.advance(0.01)
        spout.next_tuple()
        keys += [v[0] for _, v in drain(spout)]
    assert keys == spout.space.hot[:300] and spout.loaded == 300
    steady = []
    for _ in range(100):  # 1 s at 200/s, half of them hot
        clock.advance(0.01)
        spout.next_tuple()
        steady += [v[0] for _, v in drain(spout)]
    assert 190 <= len(steady) <= 200
    hot = sum(key_group(k, 20) == 7 for k in steady)
    assert 60 <= hot <= 140 and set(steady) - set(spout.space.hot[:300]) <= set(spout.space.cold)


def test_spout_follows_the_control_file(tmp_path):
    from bolts.pipeline import FakeClock, drain
    from demos.synthetic_control import write_control

    clock = FakeClock()
    spout = _spout(tmp_path, clock, **{"elastorm.synthetic.keys": 10})
    clock.advance(1.0)
    spout.next_tuple()
    drain(spout)
    write_control(str(tmp_path), {"rate": 0.0, "keys": 20})
    clock.advance(1.0)
    for _ in range(10):
        clock.advance(0.1)
        spout.next_tuple()
    out = [v[0] for _, v in drain(spout)]
    assert out == spout.space.hot[10:20]  # the 10 new keys, then rate 0: nothing


def test_output_gaps_merge_tasks_and_find_the_longest_gap_of_any_key_group() -> None:
    from drivers.synthetic import output_gaps

    # Group 1 moves from one task to another: its outputs continue on the second task.
    rows = [
        {"out": [[1, b] for b in range(50, 60)] + [[2, b] for b in range(50, 100)]},
        {"out": [[1, b] for b in range(63, 100)]},
    ]
    got = output_gaps(rows, 1.0, 2.0)  # buckets 50..100 (20 ms)
    assert got["max_group_gap_ms"] == 80 and got["group"] == 1
    assert got["job_gap_ms"] == 20 and got["groups"] == 2
    assert got["max_input_gap_ms"] is None  # no stamps in these rows


def test_a_silent_group_stalls_only_while_it_has_input_waiting() -> None:
    from drivers.synthetic import output_gaps

    # Group 1: outputs every bucket up to 60, then none until 70, but nothing was
    # stamped between (its input paused): a gap, no stall. Group 2: outputs up to 80,
    # then at 90 a tuple stamped at 81: it waited 9 buckets (180 ms) with no output.
    out1 = [[1, b, b] for b in [*range(50, 61), *range(70, 101)]]
    out2 = [[2, b, b] for b in range(50, 81)] + [[2, 90, 81]] + [[2, b, b] for b in range(91, 101)]
    stamps = [[g, sb] for g, b, sb in out1 + out2]
    got = output_gaps([{"out": out1 + out2, "in": stamps}], 1.0, 2.0)
    assert got["max_group_gap_ms"] == 200 and got["group"] == 1
    assert got["max_input_gap_ms"] == 200  # group 1's input stopped for as long
    assert got["max_group_stall_ms"] == 180 and got["stall_group"] == 2
    assert got["job_gap_ms"] == 20 and got["job_stall_ms"] == 20
    # Outside the window: the output before it bounds a stall that ends inside it, and a
    # group that never outputs again stalls to the window's end.
    rows = [{"out": [[3, 40, 40], [3, 60, 41]]}, {"out": [[4, 30, 30]]}]
    got = output_gaps(rows, 1.0, 2.0)  # buckets 50..100
    assert got["max_group_stall_ms"] == 1000 and got["stall_group"] == 4
    assert output_gaps(rows[:1], 1.0, 2.0)["max_group_stall_ms"] == 800  # 3: 52..60, 60..100


def test_latency_percentiles_from_histograms() -> None:
    from drivers.synthetic import latency_percentiles

    rows = [{"lat": [[10, 5, 98], [10, 200, 2], [11, 7, 100], [30, 9000, 5]]}]
    got = latency_percentiles(rows, 10, 11)
    assert got == {"outputs": 100, "p50_ms": 5.0, "p99_ms": 200.0}
    assert latency_percentiles(rows, 40, 50)["p50_ms"] is None


def test_spout_stamps_each_tuple_when_it_fell_due_and_resumes_a_stopped_jobs_backlog(tmp_path):
    from bolts.pipeline import FakeClock, drain
    from demos.synthetic_control import write_control

    clock = FakeClock()
    wall = FakeClock(5000.0)  # the wall clock runs with the monotonic one
    conf = {"elastorm.synthetic.keys": 100, "elastorm.synthetic.rate": 100.0}
    # A resubmitted job: its state has the 100 hot keys already, and the old job stopped
    # reading 2 s ago; everything due since then comes first, stamped when it fell due.
    write_control(str(tmp_path), {"rate": 100.0, "keys": 100, "preloaded": 100,
                                  "resume_from": 4998.0})  # fmt: skip
    from bolts.pipeline import make
    from spouts.synthetic import SyntheticSpout

    class Walled(SyntheticSpout):
        pass

    Walled.wall = staticmethod(wall)
    base = {"elastorm.output_dir": str(tmp_path), "elastorm.synthetic.cold_keys": 50}
    spout = make(Walled, base | conf, task=3, component="generator", clock=clock)
    spout.sleep = lambda _s: None
    stamps = []
    for _ in range(20):  # batches of 20 (the default): the 200-tuple backlog, then pace
        spout.next_tuple()
        stamps += [v[1] for _, v in drain(spout)]
    assert spout.loaded == 100 and len(stamps) == 200  # no preload, the whole backlog
    assert stamps[0] == pytest.approx(4998.01) and stamps[-1] == pytest.approx(5000.0)
    assert stamps == sorted(stamps)
    clock.advance(0.5)
    wall.advance(0.5)
    spout.next_tuple()
    later = [v[1] for _, v in drain(spout)]
    assert len(later) == 20 and later[-1] <= wall()  # never stamped in the future


def test_counting_step_counts_and_spends_the_work_asked():
    import time

    from bolts.synthetic import counting_step

    assert counting_step(0.0)("k", None, [1, 0.0]) == (1, 1)
    step = counting_step(2000.0)
    began = time.thread_time()
    new = None
    for _ in range(50):
        new, _result = step("k", new, [1, 0.0])
    assert new == 50 and time.thread_time() - began >= 0.099  # 50 x 2 ms of CPU


def test_checkpoint_plan_checkpoints_a_group_whose_holder_changed_and_the_hot_one_on_interval():
    plan = CheckpointPlan(hot=7, interval=5.0)
    assert plan.due(0.0, [1, 7], 0, {1: 4, 7: 4}) == [1, 7]
    assert plan.due(1.0, [1, 7], 0, {1: 4, 7: 4}) == []
    assert plan.due(2.0, [1, 7], 0, {1: 4, 7: 5}) == [7]  # the hot group's new holder
    assert plan.due(3.0, [1, 7], 0, {1: 4, 7: 5}) == []
    periodic = CheckpointPlan(hot=7, interval=5.0, hot_on_request=False)
    assert periodic.due(0.0, [7], 0) == [7]
    assert periodic.due(5.0, [7], 0) == [7]  # like a cold group


def test_first_output_reads_only_what_was_appended(tmp_path):
    from drivers.synthetic import first_output

    path = tmp_path / "outputs-3.jsonl"
    path.write_text('{"out": [], "lat": [[100, 5, 1]]}\n')
    pattern = str(tmp_path / "outputs-*.jsonl")
    seen = {str(path): path.stat().st_size}
    assert first_output(pattern, seen) is None
    with path.open("a") as f:
        f.write('{"out": [], "lat": [[130, 9, 2], [129, 9, 1]]}\n{"out": [], "lat": [[1')
    assert first_output(pattern, seen) == 129.0  # the half-written line is left for later
    assert first_output(pattern, seen, since=130) == 130.0
