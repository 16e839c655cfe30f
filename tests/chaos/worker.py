"""A chaos contender process: ``python -m tests.chaos.worker --hosts ... --dir ...``.

THREADS threads, each pinned to its own session (POOL_SIZE = THREADS), take exclusive locks on the given names
in a loop and record every hold as JSON lines in ``<dir>/<tag>-<pid>.jsonl``:

    {"ev": "session", "sid", "pw"}                        once per session that held a lock
    {"ev": "begin", "id", "name", "start", "token", "sid"}  right after acquire() returned
    {"ev": "end", "id", "end", "valid", "valid_until", "reason"}

``start``/``end`` are CLOCK_MONOTONIC, which is system-wide on Linux, so holds of different processes compare.
While holding, a thread polls ``is_held`` every 5 ms; ``valid_until`` is the last moment it was seen True
(taken *before* the call), and a thread that sees it False stops holding at once, as an application must.

A thread that acquires while ``<dir>/want-long-hold`` (or ``want-long-hold-<its pid>``) exists claims it (one
rename wins), records
``{"ev": "long", "id", "sid", "name", "pid", "node"}`` and holds for the session timeout + 1.5 s unless it
loses the lock first: the controller has a holder to freeze the server of, to expire, or to kill.

With ``--work``, a hold is work under ``zk_lock(..., on_lost="cancel")`` instead: the thread works in steps of
2 ms, each behind ``checkpoint()`` (no look at ``is_held``), until its hold time is up or LockLost stops it, and
records the interval of the work it did: ``valid_until`` is its ``end``, taken after the last step (or in the
handler of LockLost), so the checker's exclusion applies to the whole work interval. ``end`` also carries
``margin``: how long before its lease's end the loss stopped the work (negative: after).

Control files in ``<dir>``: ``stop`` (finish the current hold, stop acquiring, then write ``idle-<pid>`` and
keep the sessions open), ``exit`` (close every session and exit 0), and ``pause-<pid>``: while it exists, each
thread finishes its current acquire and hold and starts no other, and once all of them wait the process writes
``paused-<pid>`` (its sessions stay open, idle: no hold, no waiter); it removes that file when it resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

POLL = 0.005


def setup(args) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="zklocks-tests",  # tests/settings.py's: the aliases derive their identity from it
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        ZKLOCKS={
            "default": {
                "HOSTS": args.hosts,
                "NAMESPACE": args.namespace,
                "SESSION_TIMEOUT": args.session_timeout,
                "CONNECT_TIMEOUT": args.connect_timeout,
                "POOL_SIZE": args.threads,
                "REAP_INTERVAL": args.reap_interval,
                "TICK_TIME": args.tick_time,  # the servers' tickTime: the lease's relay gap (docs/reliability.md)
            }
        },
        USE_TZ=True,
    )
    django.setup()


class Recorder:
    """Whole JSON lines through one O_APPEND descriptor: one write() each, so a kill -9 never tears a line."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.sessions: set[int] = set()
        self.lock = threading.Lock()

    def write(self, **record) -> None:
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def session(self, sid: int, pw: bytes) -> None:
        with self.lock:
            if sid in self.sessions:
                return
            self.sessions.add(sid)
        self.write(ev="session", sid=sid, pw=pw.hex())


def hold_duration(rng: random.Random, long_share: float) -> float:
    if rng.random() < long_share:
        return rng.uniform(0.4, 0.8)  # long holds give the controller a holder to kill or expire
    return rng.uniform(0.003, 0.02)


def wait_held(lock, timeout: float) -> bool:
    """Whether ``is_held`` turns True again within ``timeout`` (the hold survived its suspension)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.is_held:
            return True
        time.sleep(POLL)
    return False


def claim_long_hold(control: Path, hold_id: str) -> bool:
    """Claim the controller's request for a long hold: ``want-long-hold`` (any process) or
    ``want-long-hold-<pid>`` (this one)."""
    for wanted in ("want-long-hold", f"want-long-hold-{os.getpid()}"):
        try:
            os.rename(control / wanted, control / f"long-hold-{hold_id}")
            return True
        except FileNotFoundError:
            continue
    return False


class Pause:
    """Threads wait at the top of their loop while ``paused`` is set; ``idle`` counts those that wait."""

    def __init__(self) -> None:
        self.paused = threading.Event()
        self.resumed = threading.Event()
        self.resumed.set()
        self.idle = 0
        self.lock = threading.Lock()

    def set(self, on: bool) -> None:
        if on:
            self.resumed.clear()
            self.paused.set()
        else:
            self.paused.clear()
            self.resumed.set()

    def wait_if_paused(self, stop: threading.Event) -> None:
        if not self.paused.is_set():
            return
        with self.lock:
            self.idle += 1
        try:
            while not self.resumed.wait(0.05) and not stop.is_set():
                pass
        finally:
            with self.lock:
                self.idle -= 1


def contend(idx: int, args, rec: Recorder, stop: threading.Event, counts: dict, pause: Pause) -> None:
    rng = random.Random(os.getpid() * 1000 + idx)
    n = 0
    while not stop.is_set():
        pause.wait_if_paused(stop)
        if stop.is_set():
            break
        try:
            n += hold_once(idx, n, args, rec, rng, counts)
        except Exception as exc:  # anything unexpected is a bug the checker must see
            rec.write(ev="crash", error=repr(exc), at=time.monotonic())
            counts["crashes"] += 1
            time.sleep(0.1)


# How a hold's body does its work under on_lost="cancel" (--work): in steps behind checkpoint(); in steps that
# swallow the LockLost of their checkpoint (a per-item except); handed to asyncio.to_thread by an asyncio task;
# handed to asgiref's sync_to_async (Django's async ORM pattern; thread_sensitive=False, so that the process's
# contender threads do not queue for asgiref's one shared thread); and, in a to_thread task, a child task that
# try-locks the parent's handle and releases it in finally.
BODIES = ("steps", "swallow", "to_thread", "sync_to_async", "child")


class WorkRecord:
    """The begin and end of one hold's work interval in the recorder; ``last`` is when the last step of work
    ended (the interval's end: after it no step ran)."""

    def __init__(self, idx: int, n: int, args, rec: Recorder, rng: random.Random, counts: dict, body: str) -> None:
        self.hold_id = f"{os.getpid()}-{idx}-{n + 1}"
        self.args, self.rec, self.rng, self.counts, self.body = args, rec, rng, counts, body
        self.begun = self.ended = False
        self.last = self.last_clock = 0.0

    def begin(self, lock, name: str) -> float:
        """Record the hold's start; the moment its work is to end."""
        from zklocks.client import clock

        start = self.last = time.monotonic()
        self.last_clock = clock.now()
        hold = lock._hold()
        client = hold.session.client
        sid, pw = client._session_id, client._session_passwd
        self.rec.session(sid, pw)
        self.rec.write(ev="begin", id=self.hold_id, name=name, start=start, token=lock.token, sid=sid, body=self.body)
        self.begun = True
        hold_until = start + hold_duration(self.rng, self.args.long_share)
        if claim_long_hold(Path(self.args.dir), self.hold_id):
            node = hold.contender.node
            self.rec.write(ev="long", id=self.hold_id, sid=sid, name=name, pid=os.getpid(), node=node)
            hold_until = start + self.args.session_timeout + 1.5
        return hold_until

    def step(self) -> None:
        """One step of work, behind the checkpoint where on_lost="cancel" stops a thread."""
        from zklocks import checkpoint
        from zklocks.client import clock

        checkpoint()
        time.sleep(0.002)
        self.last, self.last_clock = time.monotonic(), clock.now()

    def end(self, exc=None) -> None:
        if not self.begun or self.ended:
            return
        self.ended = True
        if exc is None:
            self.rec.write(ev="end", id=self.hold_id, end=self.last, valid=True, valid_until=self.last, reason=None)
        else:
            # How long before the lease's end the work stopped: its last step, not this record (an asyncio body
            # ends its loop first, which may wait for a child task's call to ZooKeeper).
            margin = exc.lease_end - self.last_clock if getattr(exc, "lease_end", None) else None
            self.rec.write(
                ev="end", id=self.hold_id, end=self.last, valid=False, valid_until=self.last, reason=exc.reason,
                margin=margin,
            )  # fmt: skip
            self.counts["lost"] += 1
        self.counts["holds"] += 1


def work_once(idx: int, n: int, args, rec: Recorder, rng: random.Random, counts: dict) -> int:
    """One acquire and, if it succeeds, one recorded work interval, stopped by on_lost="cancel" if the lock is
    lost. Returns 1 for a hold, 0 otherwise."""
    from zklocks import LockLost, LockTimeout, ZkUnavailable

    name = rng.choice(args.names.split(","))
    work = WorkRecord(idx, n, args, rec, rng, counts, rng.choice(BODIES))
    try:
        if work.body in ("steps", "swallow"):
            _work_in_this_thread(work, name, rng)
        else:
            _work_from_a_task(work, name, rng)
    except LockTimeout:
        counts["timeouts"] += 1
        return 0
    except LockLost as exc:
        work.end(exc)  # nothing when it came before the work began (between the grant and the body's first line)
    except ZkUnavailable:
        counts["unavailable"] += 1
        time.sleep(0.1)
        return 0
    return int(work.begun)


def _work_in_this_thread(work: WorkRecord, name: str, rng: random.Random) -> None:
    from zklocks import LockLost, zk_lock

    swallowed = None
    with zk_lock(name, timeout=rng.uniform(1.0, 6.0), on_lost="cancel") as lock:
        hold_until = work.begin(lock, name)
        while time.monotonic() < hold_until:
            if work.body == "steps":
                work.step()
                continue
            try:
                work.step()
            except LockLost as exc:  # the batch job's per-item except: it goes on to the next item
                swallowed = exc
                time.sleep(0.002)
    work.end(swallowed)  # not reached when swallowed: the with statement raised LockLost (work_once ends it)


def _work_from_a_task(work: WorkRecord, name: str, rng: random.Random) -> None:
    import asyncio

    from asgiref.sync import sync_to_async

    from zklocks import LockOwnershipError, zk_lock

    started, stopped = threading.Event(), threading.Event()

    def steps(hold_until: float) -> None:
        started.set()
        try:
            while time.monotonic() < hold_until:
                work.step()
        finally:
            stopped.set()

    async def body() -> None:
        lock = zk_lock(name, timeout=rng.uniform(1.0, 6.0), on_lost="cancel")
        async with lock:
            hold_until = work.begin(lock, name)
            if work.body == "child":

                async def child() -> bool:
                    got = False
                    try:
                        got = await lock.acquire_async(blocking=False)  # the parent holds it: False
                    finally:
                        try:
                            lock.release()  # must never free the parent's hold
                        except LockOwnershipError:
                            pass
                    return got

                assert not await asyncio.create_task(child()), "a child task took its parent's lock"
            if work.body == "sync_to_async":
                await sync_to_async(steps, thread_sensitive=False)(hold_until)
            else:
                await asyncio.to_thread(steps, hold_until)

    try:
        asyncio.run(body())
    finally:
        # The task may leave its hold (cancelled at the loss) before the thread reaches its next checkpoint: the
        # work interval ends when the thread's last step did.
        # asyncio.run has shut its executor down: a thread that never started (the task was cancelled first) never
        # will.
        if started.is_set() and not stopped.wait(10):
            raise RuntimeError("the work handed to a thread did not stop within 10 s of its task")
    work.end()


def hold_once(idx: int, n: int, args, rec: Recorder, rng: random.Random, counts: dict) -> int:
    """One acquire and, if it succeeds, one recorded hold. Returns 1 for a hold, 0 otherwise."""
    from zklocks import ZkUnavailable, zk_lock

    if args.work:
        return work_once(idx, n, args, rec, rng, counts)

    name = rng.choice(args.names.split(","))
    lock = zk_lock(name, timeout=rng.uniform(1.0, 6.0))
    try:
        if not lock.acquire():
            counts["timeouts"] += 1
            return 0
    except ZkUnavailable:
        counts["unavailable"] += 1
        time.sleep(0.1)
        return 0
    start = time.monotonic()
    try:
        record_hold(idx, n, args, rec, rng, lock, name, start, counts)
    finally:
        lock.release()  # whatever happened: a lock left held would be re-entered by this thread's next acquire
    return 1


def record_hold(idx, n, args, rec, rng, lock, name, start, counts) -> None:
    hold_id = f"{os.getpid()}-{idx}-{n + 1}"
    hold = lock._hold()
    # kazoo's client_id is None while disconnected; the session id itself survives reconnections.
    client = hold.session.client
    sid, pw = client._session_id, client._session_passwd
    rec.session(sid, pw)
    rec.write(ev="begin", id=hold_id, name=name, start=start, token=lock.token, sid=sid)
    valid_until = start
    valid = True
    hold_until = start + hold_duration(rng, args.long_share)
    if claim_long_hold(Path(args.dir), hold_id):
        rec.write(ev="long", id=hold_id, sid=sid, name=name, pid=os.getpid(), node=hold.contender.node)
        hold_until = start + args.session_timeout + 1.5
    while True:
        t = time.monotonic()
        if not lock.is_held:
            valid = False  # a holder that finds is_held False must stop at once
            break
        valid_until = t
        if t >= hold_until:
            break
        time.sleep(min(POLL, hold_until - t))
    end = time.monotonic()
    reason = None if valid else (hold.lost_reason or "suspended")
    # A suspended hold is not lost: the lease could not be proven for a while (a blip), and ZooKeeper may still
    # keep the node. The holder stopped at once all the same; whether the hold came back is recorded.
    resumed = reason == "suspended" and wait_held(lock, args.session_timeout)
    rec.write(ev="end", id=hold_id, end=end, valid=valid, valid_until=valid_until, reason=reason, resumed=resumed)
    counts["holds"] += 1
    counts["lost"] += not valid


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--names", default="chaos:a,chaos:b")
    p.add_argument("--threads", type=int, default=10)
    p.add_argument("--session-timeout", type=float, default=2.0)
    p.add_argument("--connect-timeout", type=float, default=3.0)
    p.add_argument("--reap-interval", type=float, default=2.0)
    p.add_argument("--long-share", type=float, default=0.03)
    p.add_argument("--tick-time", type=float, default=None)
    p.add_argument("--dir", required=True)
    p.add_argument("--tag", default="w")
    p.add_argument("--work", action="store_true", help="record work intervals under on_lost='cancel'")
    args = p.parse_args(argv)
    setup(args)
    from zklocks.client.pools import close_all

    control = Path(args.dir)
    rec = Recorder(control / f"{args.tag}-{os.getpid()}.jsonl")
    stop = threading.Event()
    pause = Pause()
    counts = {"holds": 0, "lost": 0, "timeouts": 0, "unavailable": 0, "crashes": 0}
    threads = [
        threading.Thread(target=contend, args=(i, args, rec, stop, counts, pause), name=f"contender-{i}", daemon=True)
        for i in range(args.threads)
    ]
    for t in threads:
        t.start()
    pid = os.getpid()
    while not (control / "stop").exists():
        wanted = (control / f"pause-{pid}").exists()
        if wanted != pause.paused.is_set():
            pause.set(wanted)
            if not wanted:
                (control / f"paused-{pid}").unlink(missing_ok=True)
        if wanted and pause.idle == args.threads and not (control / f"paused-{pid}").exists():
            (control / f"paused-{pid}").touch()
        time.sleep(0.05)
    pause.set(False)
    stop.set()
    for t in threads:
        t.join(30)
    alive = sum(t.is_alive() for t in threads)
    (control / f"idle-{os.getpid()}").write_text(json.dumps({**counts, "stuck_threads": alive}))
    while not (control / "exit").exists():
        time.sleep(0.05)
    close_all()
    return 0 if alive == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
