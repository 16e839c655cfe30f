"""``python -m tests.support.beat_stop_anywhere K1,K2,...``: for each K, one Celery beat ``Service`` on
``LeaderScheduler`` in this process, with Celery's own SIGTERM handler (``celery.apps.beat.Beat.
install_sync_handler``). Once it leads and has sent two ticks, a real SIGTERM is sent to this process after the
K-th line that the main thread runs, as it enters the next function (any code: zklocks, Celery, kombu, redis-py,
Django, the standard library). The stop must end the beat's loop and leave no candidate node, for every K.

The signal lands where CPython runs a signal handler: the K-th line picks the moment, and the handler runs at
the entry of the next function called (a frame's start is where CPython checks for pending signals). Raised from a
line event, the handler's exception could land where no signal ever does: on the closing line of a ``with`` block,
after its body and before ``__exit__`` (or on a ``finally`` block's first line), which leaves the block's lock held
for good (Celery's signal dispatch lock; the handle's own lock, then the step-down after the tick hangs on it).

Each stop runs in a child forked for it, as a beat that Celery stops ends its process: whatever the interrupted
libraries leave behind dies with that process.

Configured as tests/support/beat_app.py is (the environment). Prints one line per stop; a stop that does not end
within 20 s prints every thread's stack and exits 1; a candidate node left behind exits 3.
"""

import atexit
import faulthandler
import os
import signal
import sys
import threading
import time
import traceback

from celery.apps.beat import Beat
from celery.beat import Service
from kazoo.client import KazooClient

import tests.support.beat_app as beat_app  # configures Django and the Celery app
from zklocks.celery.beat import LeaderScheduler

SENDS_BEFORE = 2  # the steady state: past the election and the first sends


def candidates(zk: KazooClient, path: str) -> list[str]:
    return [c for c in zk.get_children(path) if not c.startswith("__")] if zk.exists(path) else []


def stop_at(k: int, schedule: str) -> tuple[str, float]:
    """Run a beat until it has sent SENDS_BEFORE ticks, SIGTERM it at the k-th line after; (where, seconds)."""
    service = Service(beat_app.app, scheduler_cls=LeaderScheduler, max_interval=1, schedule_filename=schedule)
    Beat(app=beat_app.app, quiet=True).install_sync_handler(service)
    state = {"lines": 0, "where": ""}

    def trace(frame, event, arg):
        scheduler = service.__dict__.get("scheduler")  # not the property: it would build the scheduler here
        if scheduler is None or scheduler._sends < SENDS_BEFORE or state["where"]:
            return trace
        if event == "line":
            state["lines"] += 1
        elif event == "call" and state["lines"] >= k:
            # The handler runs here, in this trace call: its exception enters the new frame at its start.
            state["where"] = f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"
            sys.settrace(None)
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        return trace

    start = time.monotonic()
    sys.settrace(trace)
    try:
        service.start()
    finally:
        sys.settrace(None)
    return state["where"], time.monotonic() - start


def one_stop(k: int) -> int:
    """The stop at line k, in this (forked) process: 0, or 1 (it did not end in 20 s), or 3 (a node was left)."""
    faulthandler.dump_traceback_later(20, exit=True)
    where, took = stop_at(k, os.path.join(os.environ["ZKLOCKS_TEST_RECORDS"], f"schedule-{k}"))
    faulthandler.dump_traceback_later(15, exit=True)  # the look below and the process's exit are bounded too
    path = f"{os.environ['ZKLOCKS_TEST_NAMESPACE']}/{os.environ['ZKLOCKS_TEST_BEAT_ELECTION']}"
    zk = KazooClient(hosts=os.environ["ZKLOCKS_TEST_HOSTS"])
    zk.start(timeout=10)
    try:
        deadline = time.monotonic() + 3
        while (left := candidates(zk, path)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        zk.stop()
    print(f"k={k}: stopped at {where or 'no line (the beat ended first)'} after {took:.2f}s; left {left}", flush=True)
    if left:
        faulthandler.dump_traceback(all_threads=True)
        return 3
    return 0


def main() -> int:
    for k in (int(k) for k in sys.argv[1].split(",")):
        sys.stdout.flush()
        sys.stderr.flush()
        assert threading.active_count() == 1, "the parent must fork before any thread starts"
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = one_stop(k)
                atexit._run_exitfuncs()  # the way a stopped beat's process ends (zklocks closes its sessions)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)  # the child's own faulthandler ends it (20 s, then 15 s)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            print(f"k={k}: the stop's process exited {code}", flush=True)
            return code if code > 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
