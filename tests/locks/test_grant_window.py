"""An exception that arrives between the grant and the hold's registration leaves no node behind.

Celery's soft time limit (SoftTimeLimitExceeded) and KeyboardInterrupt arrive asynchronously, at any bytecode of
the acquiring thread. A tracer placed in that thread raises at an exact point of the window instead.
"""

import sys

import pytest

from tests.support.helpers import wait_until
from tests.support.interrupts import Interrupted, interrupted_acquire, interrupted_call, raise_at
from tests.support.threads import free_for_others, take_and_give_back
from zklocks import zk_lock, zk_semaphore
from zklocks.client.pools import Session, connections
from zklocks.handles.base import BaseHandle
from zklocks.handles.hold_registry import Hold, LongHolds
from zklocks.owners import current_owner
from zklocks.recipes import queue

pytestmark = pytest.mark.zk


def children(handle, marker):
    client = connections["default"].session().client
    return [c for c in client.get_children(handle.path) if marker in c] if client.exists(handle.path) else []


WINDOW = [
    ("Hold.__init__", Hold.__init__.__code__, 1, None),
    ("Session.add_hold", Session.add_hold.__code__, 1, None),
    ("LongHolds.add", LongHolds.add.__code__, 1, None),
    ("current_owner after the grant", current_owner.__code__, 1, BaseHandle._acquire_steps.__code__),
    ("the node's path after the create", queue.Contender._set_node.__code__, 1, queue.Contender.enqueue_steps.__code__),
]


@pytest.mark.parametrize("where, code, nth, caller", WINDOW, ids=[w[0] for w in WINDOW])
def test_an_exception_in_the_grant_window_leaves_the_lock_free(where, code, nth, caller):
    name = f"window-{code.co_name}"
    tracer, seen = raise_at(code, nth=nth, caller=caller)
    box = interrupted_acquire(zk_lock(name), tracer, after=lambda: take_and_give_back(zk_lock(name), 3))
    assert seen and "interrupted" in box, f"the tracer never fired at {where}"
    # The same owner gets a real, fresh hold (not a stale one whose node is deleted in the background) ...
    assert box["after"] is True
    # ... and another owner acquires at once: the interrupted node is gone.
    wait_until(lambda: children(zk_lock(name), "__lock__") == [], timeout=3)
    assert free_for_others(lambda: zk_lock(name)) is True


def test_an_exception_in_a_nested_acquire_does_not_keep_the_outer_lock():
    name = "window-nested"
    outer = zk_lock(name)
    tracer, seen = raise_at(current_owner.__code__, caller=BaseHandle._acquire_steps.__code__)

    def release_outer():
        outer.release()
        return True

    box = interrupted_acquire(zk_lock(name), tracer, before=outer.acquire, after=release_outer)
    assert seen and "interrupted" in box
    # The outer release is the last one: the interrupted nested acquire took no count with it.
    wait_until(lambda: children(outer, "__lock__") == [], timeout=3)
    assert free_for_others(lambda: zk_lock(name)) is True


SEMAPHORE_WINDOW = [
    ("Hold.__init__", Hold.__init__.__code__, 1),
    ("Session.add_hold", Session.add_hold.__code__, 1),
    ("the lease's path after the create", queue.Contender._set_node.__code__, 2),  # the first is the mutex's
    ("the mutex release after the lease", queue.Contender.delete_nowait.__code__, 1),
]


@pytest.mark.parametrize("where, code, nth", SEMAPHORE_WINDOW, ids=[w[0] for w in SEMAPHORE_WINDOW])
def test_an_exception_in_the_grant_window_of_a_semaphore_frees_the_lease(where, code, nth):
    name = f"window-sem-{code.co_name}"
    tracer, seen = raise_at(code, nth=nth)
    box = interrupted_acquire(zk_semaphore(name, 1), tracer)
    assert seen and "interrupted" in box, f"the tracer never fired at {where}"
    wait_until(lambda: children(zk_semaphore(name, 1), "__lease__") == [], timeout=3)
    assert free_for_others(lambda: zk_semaphore(name, 1)) is True


@pytest.mark.celery
def test_a_soft_time_limit_right_after_the_task_lock_is_granted_releases_it():
    """The soft time limit's exception is delivered between bytecodes, e.g. as the C call that follows the
    acquire in SingleExecutionTask._acquire returns; a profile function raises at exactly that point."""
    from tests.support.celery_app import rec_skip
    from zklocks.celery import SingleExecutionTask

    target = SingleExecutionTask._acquire.__code__
    seen = []
    granted = []

    def profiler(frame, event, arg):
        # The first C call in _acquire after the acquire returned True: the restore of a context variable.
        if event == "return" and frame.f_back is not None and frame.f_back.f_code is target and arg is True:
            granted.append(True)
        elif event == "c_return" and frame.f_code is target and granted and not seen:
            seen.append(arg)
            raise Interrupted("injected after the task lock was granted")

    box = interrupted_call(lambda: rec_skip.apply(args=("window", 0.0), throw=True), profiler, install=sys.setprofile)
    assert seen and "interrupted" in box
    assert getattr(seen[0], "__name__", "") == "set", seen  # ContextVar.set, restoring the task's name
    wait_until(lambda: children(zk_lock("rec:window"), "__lock__") == [], timeout=3)
    assert free_for_others(lambda: zk_lock("rec:window")) is True
