"""The chaos checker: pure functions over the workers' records and the controller's fault log.

The claim it proves, per lock name: no two holds overlapped while both were valid, and tokens strictly increase
in hold order. A hold is *valid* from its start until the last moment its holder saw ``is_held`` True
(``valid_until``), cut short by two things outside the holder's knowledge:

- a kill -9 of the holder's process: the hold ends when the process is gone (it can do nothing after);
- a session expired by someone else (the "expire a holder's session" fault): ZooKeeper revokes the lock at
  once, and no lease can foresee that; the holder learns it with the next answer from the server. Validity
  ends at the revocation, and the time the holder went on believing it held the lock is reported as its
  detection latency. This is what fencing tokens are for, so the next holder's token must be higher.

Raw intervals (start..end, when the holder actually stopped) may overlap only in that second case; the checker
reports any other raw overlap as a violation too.

A fault that wipes the ensemble's data starts a new *epoch* of tokens (see :func:`check_exclusion`), and may
name processes that must each hold a lock again within its bound (:func:`check_recovery`).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path


def seconds(t: float) -> str:
    return "never" if t == float("inf") else f"{t:.2f}s"


# A worker looks at is_held every 5 ms (worker.POLL). A holder whose two looks are further apart than this was not
# scheduled: its lease had ended (valid_until < the next holder's start) and it could not see it.
LATE_LOOK = 0.015


@dataclass
class Hold:
    id: str
    name: str
    pid: int
    sid: int
    token: int
    start: float
    end: float
    valid_until: float
    lost: bool = False  # is_held turned False during the hold (lease bound or LOST)
    reason: str | None = None
    killed: bool = False  # the process was killed -9 during the hold
    revoked_at: float | None = None  # the session was expired by the controller during the hold


@dataclass
class Fault:
    kind: str
    started: float
    ended: float  # progress is measured from here (see controller.py)
    detail: dict = field(default_factory=dict)
    bound: float | None = None  # its own progress bound, when not the run's
    # The ensemble's data was wiped: the moment its servers were started again, empty. Tokens start over.
    epoch: float | None = None
    recover: tuple[int, ...] = ()  # processes that must each hold a lock again within the bound after `ended`


@dataclass
class Report:
    holds: int = 0
    lost_holds: int = 0
    lost_reasons: dict = field(default_factory=dict)
    killed_holds: int = 0
    revoked_holds: int = 0
    revoked_sessions: int = 0  # sessions the controller expired that held something: one per expire-holder
    faults: int = 0
    overlaps: list = field(default_factory=list)  # (a, b) of valid intervals: must stay empty
    raw_overlaps: list = field(default_factory=list)  # (a, b, seconds), only with a revoked hold a
    # (a, b, seconds): a lost its lease before b started, but a's process did not run between its two looks at
    # is_held (a machine too busy to schedule it): the holder was told in time and could not look
    late_looks: list = field(default_factory=list)
    unexplained_raw_overlaps: list = field(default_factory=list)  # must stay empty
    token_errors: list = field(default_factory=list)  # must stay empty
    crashes: list = field(default_factory=list)  # unexpected exceptions in workers: must stay empty
    unfinished: list = field(default_factory=list)  # a begin without an end in a process not killed
    stalls: dict = field(default_factory=dict)  # kind -> [seconds]
    no_progress: list = field(default_factory=list)  # faults after which no one acquired within the bound
    detection: list = field(default_factory=list)  # revoked holders: seconds until they stopped
    recovery: list = field(default_factory=list)  # per fault with `recover`: {"kind", "at", "times": {pid: s}}
    slow_recovery: list = field(default_factory=list)  # (kind, pid, seconds) over the fault's bound
    orphans: int = 0
    min_sessions: int | None = None

    @property
    def ok(self) -> bool:
        return not (
            self.overlaps
            or self.unexplained_raw_overlaps
            or self.token_errors
            or self.crashes
            or self.unfinished
            or self.no_progress
            or self.slow_recovery
            or self.orphans
        )

    def longest_stalls(self) -> dict[str, float]:
        return {kind: max(values) for kind, values in sorted(self.stalls.items())}

    def summary(self) -> str:
        lines = [
            f"holds checked: {self.holds} (lost and stopped: {self.lost_holds} {self.lost_reasons}, holder "
            f"killed: {self.killed_holds}, revoked with their session: {self.revoked_holds} in "
            f"{self.revoked_sessions} session(s))",
            f"faults injected: {self.faults}",
            f"overlaps: {len(self.overlaps)}",
            f"token order errors: {len(self.token_errors)}",
            f"orphan nodes left: {self.orphans}",
            f"fewest live sessions before a fault: {self.min_sessions}",
            "longest stall per fault kind: " + ", ".join(f"{k} {v:.2f}s" for k, v in self.longest_stalls().items()),
        ]
        if self.late_looks:
            lines.append(
                f"holders that looked late (unscheduled for more than {LATE_LOOK * 1000:.0f} ms between two looks, "
                "their lease over before the next holder started): "
                + ", ".join(f"{a.end - a.valid_until:.3f}s" for a, _, _ in self.late_looks)
            )
        if self.detection:
            lines.append("revoked holders stopped after: " + ", ".join(f"{d:.3f}s" for d in self.detection))
        for rec in self.recovery:
            times = ", ".join(seconds(t) for t in sorted(rec["times"].values()))
            lines.append(f"each process held again after {rec['kind']} (from its end): {times}")
        for what in ("unexplained_raw_overlaps", "crashes", "unfinished", "no_progress", "slow_recovery"):
            items = getattr(self, what)
            if items:
                lines.append(f"{what}: {items[:5]}")
        return "\n".join(lines)


def read_events(directory: Path) -> list[tuple[int, dict]]:
    """(pid, record) for every whole line of every worker file."""
    out = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        pid = int(path.stem.rsplit("-", 1)[1])
        for line in path.read_text().splitlines():
            if line.endswith("}"):
                out.append((pid, json.loads(line)))
    return out


def build_holds(
    events: list[tuple[int, dict]], kills: dict[int, float], revocations: list[dict]
) -> tuple[list[Hold], list, list]:
    """Pair begin/end records into holds; apply kills and revocations. Returns (holds, crashes, unfinished)."""
    begins: dict[str, tuple[int, dict]] = {}
    ends: dict[str, dict] = {}
    crashes = []
    for pid, rec in events:
        ev = rec["ev"]
        if ev == "begin":
            begins[rec["id"]] = (pid, rec)
        elif ev == "end":
            ends[rec["id"]] = rec
        elif ev == "crash":
            crashes.append((pid, rec))
    holds, unfinished = [], []
    for hold_id, (pid, b) in begins.items():
        e = ends.get(hold_id)
        if e is not None:
            hold = Hold(
                hold_id,
                b["name"],
                pid,
                b["sid"],
                b["token"],
                b["start"],
                e["end"],
                e["valid_until"],
                lost=not e["valid"],
                reason=e["reason"],
            )
        elif pid in kills:
            dead = kills[pid]
            hold = Hold(hold_id, b["name"], pid, b["sid"], b["token"], b["start"], dead, dead, killed=True)
        else:
            unfinished.append(hold_id)
            continue
        holds.append(hold)
    for rev in revocations:
        for hold in holds:
            # "at" is when the expiry began, "done" when it had surely happened. The victim counts even when its
            # work ended before "at": a task cancelled by the loss before its first step of work (detection <= 0).
            overlaps = hold.sid == rev["sid"] and hold.start < rev["done"] and hold.end > rev["at"]
            if overlaps or hold.id == rev.get("hold"):
                hold.revoked_at = max(rev["at"], hold.start)
                hold.valid_until = min(hold.valid_until, hold.revoked_at)
    return holds, crashes, unfinished


def check_exclusion(holds: list[Hold], report: Report, epochs: list[float] | tuple[float, ...] = ()) -> None:
    """No two holds of a name overlap while both are valid; tokens strictly increase in hold order, within an
    epoch.

    ``epochs``: the moments the ensemble was started again after its data was wiped. A token is the czxid of
    the holder's node, and a wiped ensemble counts its zxids from the start again (epoch 1, counter 1): the
    first tokens after the wipe are lower than the last ones before it, and no order between the two can be
    asked of the lock service, which no longer knows the old ones. So tokens are compared only between holds of
    one epoch (a fenced store that kept a token from before the wipe refuses every new holder until its token is
    reset: an operator's step, not the lock's). Exclusion is still checked across the boundary: a holder of
    the old data must stop believing it holds before anyone acquires from the new data. The boundary is the
    moment the servers were spawned again: the old data granted its last hold before its servers were killed
    (a worker writes the hold's start as acquire() returns), the new data grants its first once new servers
    have started and elected a leader, which takes far longer than the kill and the wipe between the two."""
    boundaries = sorted(epochs)
    by_name: dict[str, list[Hold]] = {}
    for hold in holds:
        by_name.setdefault(hold.name, []).append(hold)
    for group in by_name.values():
        group.sort(key=lambda h: (h.start, h.token))
        active: list[Hold] = []
        for b in group:
            active = [a for a in active if a.end > b.start or a.valid_until > b.start]
            for a in active:
                if a.valid_until > b.start:
                    report.overlaps.append((a, b))
                elif a.end > b.start:
                    entry = (a, b, round(a.end - b.start, 4))
                    if a.revoked_at is not None:
                        report.raw_overlaps.append(entry)
                    elif a.lost and a.end - a.valid_until > LATE_LOOK:
                        report.late_looks.append(entry)
                    else:
                        report.unexplained_raw_overlaps.append(entry)
            active.append(b)
        for a, b in pairwise(group):
            same_epoch = bisect_right(boundaries, a.start) == bisect_right(boundaries, b.start)
            if same_epoch and not a.token < b.token:
                report.token_errors.append((a, b))


def check_progress(holds: list[Hold], faults: list[Fault], names: list[str], bound: float, report: Report) -> None:
    starts = {name: sorted(h.start for h in holds if h.name == name) for name in names}
    for fault in faults:
        worst = 0.0
        for name in names:
            after = next((s for s in starts[name] if s > fault.ended), None)
            if after is None:
                worst = float("inf")
                break
            worst = max(worst, after - fault.ended)
        report.stalls.setdefault(fault.kind, []).append(worst)
        if worst > (fault.bound or bound):
            report.no_progress.append((fault.kind, round(fault.ended, 3), worst))


def check_recovery(holds: list[Hold], faults: list[Fault], bound: float, report: Report) -> None:
    """For each fault that names processes to ``recover``: how long after its end each of them began a hold
    again (0 if it did before the controller saw the ensemble whole; only holds granted after the fault's
    ``epoch``, if any, count), and which took longer than the fault's bound (inf: never)."""
    starts: dict[int, list[float]] = {}
    for hold in holds:
        starts.setdefault(hold.pid, []).append(hold.start)
    for pid_starts in starts.values():
        pid_starts.sort()
    for fault in faults:
        if not fault.recover:
            continue
        since = fault.ended if fault.epoch is None else fault.epoch
        limit = fault.bound or bound
        times = {}
        for pid in fault.recover:
            after = next((s for s in starts.get(pid, []) if s > since), None)
            took = float("inf") if after is None else max(0.0, after - fault.ended)
            times[pid] = round(took, 3)
            if took > limit:
                report.slow_recovery.append((fault.kind, pid, times[pid]))
        report.recovery.append({"kind": fault.kind, "at": fault.ended, "times": times})


def check(
    events,
    faults: list[Fault],
    kills: dict[int, float],
    revocations: list[dict],
    names: list[str],
    progress_bound: float,
) -> Report:
    report = Report()
    holds, report.crashes, report.unfinished = build_holds(events, kills, revocations)
    report.holds = len(holds)
    report.lost_holds = sum(h.lost for h in holds)
    for h in holds:
        if h.lost:
            report.lost_reasons[h.reason] = report.lost_reasons.get(h.reason, 0) + 1
    report.killed_holds = sum(h.killed for h in holds)
    revoked = [h for h in holds if h.revoked_at is not None]
    report.revoked_holds = len(revoked)  # every hold of an expired session: a process's threads share one
    report.revoked_sessions = len({h.sid for h in revoked})
    report.detection = [round(h.end - h.revoked_at, 4) for h in revoked]
    report.faults = len(faults)
    check_exclusion(holds, report, [f.epoch for f in faults if f.epoch is not None])
    check_progress(holds, faults, names, progress_bound, report)
    check_recovery(holds, faults, progress_bound, report)
    return report
