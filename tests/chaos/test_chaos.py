"""The chaos suite: contenders in many processes on a real 3-node ensemble, under real faults.

The short form (one fault of each kind) runs in ``make test``; ``make chaos`` passes ``--chaos-long`` for
several rounds in random order. See docs/reliability.md for the method and the figures.
"""

import json
import os
import random
from collections import Counter

import pytest

from tests.chaos.checker import (
    Fault,
    Hold,
    Report,
    check,
    check_exclusion,
    check_progress,
    read_events,
    seconds,
)
from tests.chaos.controller import MIN_SESSIONS, SHORT_PLAN, ChaosRun
from tests.chaos.worker import BODIES as WORK_BODIES
from zklocks.client import lease
from zklocks.testing import ZkEnsemble

pytestmark = pytest.mark.chaos

LONG_ROUNDS = 10


def begin(hid, name, start, token, sid=1):
    return {"ev": "begin", "id": hid, "name": name, "start": start, "token": token, "sid": sid}


def end(hid, at, valid=True, valid_until=None):
    return {
        "ev": "end",
        "id": hid,
        "end": at,
        "valid": valid,
        "valid_until": at if valid_until is None else valid_until,
        "reason": None if valid else "suspended",
    }


def test_checker_finds_overlaps_token_errors_and_stalls():
    """The checker itself must be able to fail: feed it records that break each property."""
    events = [
        (1, begin("a", "x", 0.0, 10)),
        (1, end("a", 1.0)),
        (2, begin("b", "x", 0.5, 12)),
        (2, end("b", 2.0)),  # overlaps a while both valid
        (3, begin("c", "x", 2.5, 11)),
        (3, end("c", 3.0)),  # token lower than b's
        (4, begin("d", "y", 0.0, 5)),
        (4, end("d", 0.1)),
    ]
    report = check(events, [Fault("kill-leader", 3.5, 3.5)], {}, [], ["x", "y"], progress_bound=4.2)
    assert [(a.id, b.id) for a, b in report.overlaps] == [("a", "b")]
    assert [(a.id, b.id) for a, b in report.token_errors] == [("b", "c")]
    assert report.no_progress and report.stalls["kill-leader"] == [float("inf")]
    assert not report.ok


def test_checker_accounts_for_lost_killed_and_revoked_holds():
    events = [
        # a lost its lease at 1.0 and stopped at 1.004; b started at 1.5: no overlap
        (1, begin("a", "x", 0.0, 10, sid=7)),
        (1, end("a", 1.004, valid=False, valid_until=1.0)),
        (2, begin("b", "x", 1.5, 12, sid=8)),  # b's process was killed at 2.0
        # c's session was expired by someone else at 2.5; c noticed at 2.6, d got the lock at 2.55
        (3, begin("c", "x", 2.1, 13, sid=9)),
        (3, end("c", 2.6, valid=True)),
        (4, begin("d", "x", 2.55, 14, sid=10)),
        (4, end("d", 3.0)),
    ]
    report = check(
        events,
        [Fault("kill-holder", 2.0, 2.0)],
        {2: 2.0},
        [{"sid": 9, "at": 2.5, "done": 2.52}],
        ["x"],
        progress_bound=4.2,
    )
    assert report.overlaps == [] and report.token_errors == [] and report.unexplained_raw_overlaps == []
    assert report.lost_holds == 1 and report.killed_holds == 1 and report.revoked_holds == 1
    assert [(a.id, b.id, d) for a, b, d in report.raw_overlaps] == [("c", "d", 0.05)]
    assert report.detection == [0.1]
    assert report.stalls == {"kill-holder": [pytest.approx(0.1)]} and report.ok
    # The same raw overlap without a revocation is a violation.
    bad = check(events, [], {2: 2.0}, [], ["x"], progress_bound=4.2)
    assert [(a.id, b.id) for a, b in bad.overlaps] == [("c", "d")] and not bad.ok


def test_checker_counts_a_victim_whose_work_ended_before_the_expiry_began():
    """A task cancelled by the loss before its first step of work has an interval that ends at its start: the
    expiry of its session still revoked that hold."""
    events = [(1, begin("a", "x", 1.0, 10, sid=7)), (1, end("a", 1.0, valid=False, valid_until=1.0))]
    report = check(events, [], {}, [{"sid": 7, "at": 1.2, "done": 1.3, "hold": "a"}], ["x"], progress_bound=4.2)
    assert report.revoked_holds == 1 and report.detection == [-0.2] and report.ok
    other = check(events, [], {}, [{"sid": 7, "at": 1.2, "done": 1.3, "hold": "b"}], ["x"], progress_bound=4.2)
    assert other.revoked_holds == 0


def test_checker_tells_a_holder_that_looked_late_from_one_that_went_on():
    # a's lease ended at 1.0 (its last look that saw it held); b started at 1.01, before a's next look.
    late = [
        (1, begin("a", "x", 0.0, 10, sid=7)),
        (1, end("a", 1.02, valid=False, valid_until=1.0)),  # 20 ms between two looks: a was not scheduled
        (2, begin("b", "x", 1.01, 12, sid=8)),
        (2, end("b", 1.5)),
    ]
    report = check(late, [], {}, [], ["x"], progress_bound=4.2)
    assert report.overlaps == [] and report.unexplained_raw_overlaps == [] and report.ok
    assert [(a.id, b.id) for a, b, _ in report.late_looks] == [("a", "b")]
    # A holder that looked on time and still ended after b started is a violation.
    on_time = [
        (1, begin("a", "x", 0.0, 10, sid=7)),
        (1, end("a", 1.012, valid=False, valid_until=1.0)),
        (2, begin("b", "x", 1.01, 12, sid=8)),
        (2, end("b", 1.5)),
    ]
    bad = check(on_time, [], {}, [], ["x"], progress_bound=4.2)
    assert [(a.id, b.id) for a, b, _ in bad.unexplained_raw_overlaps] == [("a", "b")] and not bad.ok


def test_checker_sweeps_many_holds_in_order():
    rng = random.Random(7)
    holds, t = [], 0.0
    for i in range(2000):
        t += rng.uniform(0.001, 0.01)
        length = rng.uniform(0.0005, 0.005)
        holds.append(Hold(str(i), "x", 1, 1, i, t, t + length, t + length))
        t += length
    report = Report()
    check_exclusion(holds, report)
    assert report.overlaps == [] and report.token_errors == []
    holds[1000].valid_until = holds[1000].end = holds[1001].start + 0.0001
    check_exclusion(holds, report)
    assert [(a.id, b.id) for a, b in report.overlaps] == [("1000", "1001")]
    check_progress(holds, [Fault("k", 1.0, 1.0)], ["x"], 4.2, report)
    assert report.stalls["k"][0] < 0.02


def test_checker_starts_token_order_over_at_a_wipe_and_times_each_process_recovery():
    """After a wipe the tokens start over: compared within an epoch only. Each process named by the fault must hold
    again within its bound, measured from the fault's end; one that never does is reported (inf)."""
    events = [
        (1, begin("a", "x", 0.0, 900)),
        (1, end("a", 0.5)),
        (2, begin("b", "x", 0.6, 901)),
        (2, end("b", 0.9)),
        # wiped at 1.0, servers spawned again at 1.2, the ensemble whole at 2.0
        (1, begin("c", "x", 3.0, 5)),
        (1, end("c", 3.1)),
        (2, begin("d", "x", 4.5, 4)),  # lower than c's in the same epoch
        (2, end("d", 4.6)),
    ]
    wipe = Fault("wipe-ensemble", 1.0, 2.0, bound=2.0, epoch=1.2, recover=(1, 2, 3))
    report = check(events, [wipe], {}, [], ["x"], progress_bound=4.2)
    assert [(a.id, b.id) for a, b in report.token_errors] == [("c", "d")]
    assert report.recovery == [{"kind": "wipe-ensemble", "at": 2.0, "times": {1: 1.0, 2: 2.5, 3: float("inf")}}]
    assert report.slow_recovery == [("wipe-ensemble", 2, 2.5), ("wipe-ensemble", 3, float("inf"))]
    assert report.overlaps == [] and report.no_progress == [] and not report.ok
    # Without the epoch, b -> c is a token error too; a hold that began before the epoch is no recovery.
    unmarked = check(events, [Fault("restart-ensemble", 1.0, 2.0)], {}, [], ["x"], progress_bound=4.2)
    assert [(a.id, b.id) for a, b in unmarked.token_errors] == [("b", "c"), ("c", "d")]
    early = check(events[:4], [wipe], {}, [], ["x"], progress_bound=4.2)
    assert early.recovery[0]["times"] == {1: float("inf"), 2: float("inf"), 3: float("inf")}
    assert early.no_progress == [("wipe-ensemble", 2.0, float("inf"))]


def plan(long: bool, seed: int) -> list[str]:
    chosen = os.environ.get("ZKLOCKS_CHAOS_PLAN")  # e.g. idle-blip,outage-release: those faults alone
    if chosen:
        return chosen.split(",")
    if not long:
        return list(SHORT_PLAN)
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(LONG_ROUNDS):
        out += rng.sample(SHORT_PLAN, len(SHORT_PLAN))
    return out


def overlaps_by_fault(report: Report, faults: list[Fault], bound: float) -> dict[str, tuple[float, int]]:
    """For the log: each overlap charged to the fault during which (or within ``bound`` after) it began."""
    out: dict[str, tuple[float, int]] = {}
    for a, b in report.overlaps:
        kind = next((f.kind for f in faults if f.started <= b.start <= f.ended + bound), "no fault")
        worst, count = out.get(kind, (0.0, 0))
        out[kind] = (max(worst, a.valid_until - b.start), count + 1)
    return out


@pytest.mark.timeout(1800)
def test_chaos_on_a_real_ensemble(request, tmp_path, capsys):
    long = request.config.getoption("--chaos-long")
    lines: list[str] = []

    def log(text: str) -> None:
        lines.append(text)
        with capsys.disabled():
            print(text, flush=True)

    seed = int(os.environ.get("ZKLOCKS_CHAOS_SEED") or random.randrange(1 << 30))
    faults = plan(long, seed)
    # start() returns once each server leads or follows on its own ports, trying again on fresh ports if a server
    # lost one (zklocks.testing.server); the controller checks it again before each fault.
    ensemble = ZkEnsemble(3, tick_time=200, server_links=True)
    run = None
    try:
        ensemble.start()
        # The short form lets contention run a while between faults, so each run checks thousands of holds.
        run = ChaosRun(
            ensemble,
            tmp_path / "chaos",
            settle=1.0 if long else 4.0,
            seed=seed,
            log=log,
            sigstop_targets=("holder", "leader", "follower") if long else ("holder",),
        )
        log(
            f"\nchaos ({'long' if long else 'short'} form): 3-node ensemble, {run.n_workers} processes x "
            f"{run.threads} sessions, locks {run.names}, session timeout {run.session_timeout}s, "
            f"progress bound {run.bound:.1f}s, seed {seed} (ZKLOCKS_CHAOS_SEED)"
        )
        run.start()
        run.run(faults)
        run.finish()
    finally:
        if run is not None:
            run.cleanup()
        ensemble.cleanup()
    report = run.report()
    counts = run.idle_counts()
    log(report.summary())
    for kind, worst in overlaps_by_fault(report, run.faults, run.bound).items():
        log(
            f"overlaps after {kind}: {worst[1]}, longest {worst[0]:.3f}s (earlier holder still valid after the "
            f"next acquired)"
        )
    wipes = [f for f in run.faults if f.recover]
    for fault, rec in zip(wipes, report.recovery, strict=True):
        idle = set(fault.detail.get("idle", ()))
        times = ", ".join(f"{pid}{' idle' if pid in idle else ''} {seconds(t)}" for pid, t in rec["times"].items())
        log(f"recovery after {rec['kind']} (bound {run.recovery_bound:.1f}s from its end), per process: {times}")
    log(f"worker counts: {counts}; exit codes {run.exit_codes}")
    if os.environ.get("ZKLOCKS_CHAOS_LOG"):
        with open(os.environ["ZKLOCKS_CHAOS_LOG"], "a") as f:
            f.write(
                json.dumps(
                    {
                        "form": "long" if long else "short",
                        "seed": seed,
                        "holds": report.holds,
                        "lost": report.lost_holds,
                        "killed": report.killed_holds,
                        "revoked": report.revoked_holds,
                        "faults": report.faults,
                        "overlaps": len(report.overlaps),
                        "orphans": report.orphans,
                        "min_sessions": report.min_sessions,
                        "stalls": report.longest_stalls(),
                        "detection": report.detection,
                        "recovery": [rec["times"] for rec in report.recovery],
                        "counts": counts,
                        "faults_detail": [(f.kind, f.detail) for f in run.faults],
                    }
                )
                + "\n"
            )
    assert report.faults == len(faults)
    assert report.overlaps == []
    assert report.unexplained_raw_overlaps == []
    assert report.token_errors == []
    assert report.crashes == [] and report.unfinished == []
    # Every process holds again within SESSION_TIMEOUT + CONNECT_TIMEOUT + RECOVERY_SLACK of a wiped ensemble's
    # return: its old sessions are refused (they saw later zxids) or unknown, so it must start new ones.
    assert len(report.recovery) == faults.count("wipe-ensemble")
    assert report.slow_recovery == [], (run.recovery_bound, report.recovery)
    assert report.no_progress == [], report.longest_stalls()
    assert run.orphans == []
    assert report.min_sessions >= MIN_SESSIONS
    assert all(code == 0 for code in run.exit_codes), run.exit_codes
    assert report.holds > 500
    if long:
        assert report.holds >= 10_000, report.holds
    assert all(f.detail["died_holding"] for f in run.faults if f.kind == "kill-holder")
    # An idle holder keeps its hold through a silent blip of half the session timeout; the locks released during
    # an outage are free within 1 s of the servers' return with their data (no ghost of a given-up session).
    assert all(f.detail["holder"].startswith("kept it") for f in run.faults if f.kind == "idle-blip"), [
        f.detail for f in run.faults if f.kind == "idle-blip"
    ]
    ghosts = [f.detail["ghosts"] for f in run.faults if f.kind == "outage-release"]
    assert all(g is not None and g <= 1.0 for g in ghosts), ghosts
    expired = sum(f.kind == "expire-holder" for f in run.faults)
    assert report.revoked_sessions == expired and report.revoked_holds >= expired
    assert counts.get("stuck_threads", 0) == 0


# Faults that make a long hold lose its lock while it works: its server frozen or cut off from the others (its
# lease runs out), or its session expired by someone else (a revocation: see below).
WORK_PLAN = ["sigstop", "cut-follower", "isolate-leader", "split", "flap-link", "expire-holder"]
WORK_LONG_ROUNDS = 8


@pytest.mark.timeout(1800)
def test_work_never_overlaps_under_on_lost_cancel(request, tmp_path, capsys):
    """Contenders work under ``zk_lock(..., on_lost="cancel")`` and record the interval of the work itself: no
    two work intervals of a name overlap. A hold whose lease runs out is stopped before the lease ends; a session
    expired by someone else is revoked at once, which no client can foresee (the checker reports that overlap
    apart, as in the main chaos test; fencing tokens cover it)."""
    long = request.config.getoption("--chaos-long")
    seed = int(os.environ.get("ZKLOCKS_CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    faults = [k for _ in range(WORK_LONG_ROUNDS if long else 1) for k in rng.sample(WORK_PLAN, len(WORK_PLAN))]

    def log(text: str) -> None:
        with capsys.disabled():
            print(text, flush=True)

    ensemble = ZkEnsemble(3, tick_time=200, server_links=True)
    run = None
    try:
        ensemble.start()
        run = ChaosRun(
            ensemble,
            tmp_path / "work",
            settle=5.0 if long else 3.0,
            seed=seed,
            log=log,
            work=True,
            sigstop_targets=("holder",),
        )
        log(f"\nchaos, work intervals ({'long' if long else 'short'} form): {len(faults)} faults, seed {seed}")
        run.start()
        run.run(faults)
        run.finish()
    finally:
        if run is not None:
            run.cleanup()
        ensemble.cleanup()
    report = run.report()
    events = [rec for _, rec in read_events(run.dir)]
    ends = [rec for rec in events if rec["ev"] == "end"]
    stopped = [rec for rec in ends if not rec["valid"]]
    body_of = {rec["id"]: rec.get("body") for rec in events if rec["ev"] == "begin"}
    by_body = Counter(body_of.values())
    stopped_by_body = Counter(body_of.get(rec["id"]) for rec in stopped)
    margins = sorted(rec["margin"] for rec in stopped if rec.get("margin") is not None)
    log(report.summary())
    log(f"bodies (holds / stopped): {', '.join(f'{b} {by_body[b]}/{stopped_by_body[b]}' for b in sorted(by_body))}")
    log(
        f"work holds stopped by on_lost='cancel': {len(stopped)} "
        f"({', '.join(sorted({str(r['reason']) for r in stopped}))}); of those stopped at their lease's end, "
        f"the earliest {1000 * margins[-1]:.1f} ms and the latest {1000 * margins[0]:.1f} ms before it"
        if margins
        else f"work holds stopped: {len(stopped)}"
    )
    assert report.faults == len(faults)
    assert report.overlaps == [], [(a.id, b.id) for a, b in report.overlaps]
    assert report.unexplained_raw_overlaps == []
    assert report.token_errors == []
    assert report.crashes == [] and report.unfinished == []
    assert report.no_progress == [], report.longest_stalls()
    assert run.orphans == []
    assert all(code == 0 for code in run.exit_codes), run.exit_codes
    assert report.revoked_sessions == faults.count("expire-holder")
    assert report.revoked_holds >= faults.count("expire-holder")  # a session's other holds (its threads') too
    # Long holds were made to lose their lock, and on_lost stopped their work before the leader's earliest expiry:
    # the lease's end plus its margin (lease.loss_margin), room for a thread starved of CPU, as in test_on_lost.py.
    # The checker above proves the intervals themselves never overlap.
    assert margins and margins[0] >= -lease.loss_margin(run.session_timeout), margins[:5]
    assert report.holds > 300
    assert set(by_body) == set(WORK_BODIES), by_body  # every kind of body ran
    if long:
        assert report.holds >= 10_000, report.holds
