"""``on_lost`` and ``max_hold`` on a handle: arm a stopper (stopping.py) when an acquire succeeds, disarm it first
thing in the release, turn the cancellation of an ``async with`` into LockLost, and end a hold at its cap.

A part of :class:`~zklocks.handles.base.BaseHandle`: the attributes annotated here are the handle's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from .. import owners
from ..client import worker_threads
from .hold_registry import Hold
from .stopping import Stopper, note_armed, note_disarmed


class Enforcing:
    """The handle's side of on_lost and max_hold."""

    name: str
    using: str
    _mine: dict[object, list[Hold]]
    _mine_lock: threading.Lock
    _stops: dict[object, list[tuple[int, Stopper]]]  # owner -> (stack depth, stopper)

    on_lost: str = "notify"
    max_hold: float | None = None
    # SingleExecutionTask's "terminate": what ends the worker process (celery/terminate.py)
    terminate: Callable[[Stopper], None] | None = None

    def _release_hold(self, hold: Hold, wait: bool) -> None:
        raise NotImplementedError

    # -- arming, after a successful acquire --

    def _arm(self, owner: object | None = None) -> Stopper | None:
        """Called by the acquiring owner (the thread, or the task on its loop) once its hold is on the stack."""
        owner = owners.current_owner() if owner is None else owner
        with self._mine_lock:
            stack = self._mine.get(owner)
            if not stack:
                return None
            depth, hold = len(stack), stack[-1]
        if self.max_hold is not None:
            self._schedule_cap(hold, self.max_hold)
        if self.on_lost == "notify" or (self.on_lost == "terminate" and self.terminate is None):
            return None
        stopper = Stopper(hold, self.on_lost, self.terminate, owner)
        note_armed(stopper)
        with self._mine_lock:
            self._stops.setdefault(owner, []).append((depth, stopper))
        hold.stoppers.append(stopper)
        if hold.lost:  # lost between the grant and now: stop at once
            stopper.fire(hold.lost_reason or "lost")
        return stopper

    def _arming_here(self) -> bool:
        """A sync acquire arms for its thread, unless it runs on behalf of an asyncio task (async_bridge.py),
        which arms for itself on its loop."""
        return not owners.acting_for_another()

    # -- disarming, first thing in a release --

    def _top_stoppers(self, owner: object) -> list[Stopper]:
        """The stoppers of ``owner``'s innermost hold."""
        with self._mine_lock:
            stops = self._stops.get(owner)
            if not stops:
                return []
            depth = len(self._mine.get(owner, ()))
            return [s for d, s in stops if d >= depth]

    def _disarm_top(self, owner: object) -> list[Stopper]:
        """Disarm the stoppers of ``owner``'s innermost hold; idempotent (a release retried after a signal
        handler's exception)."""
        mine = self._top_stoppers(owner)
        for stopper in mine:
            stopper.disarm()
        note_disarmed(mine)
        return mine

    def _unlist_top(self, owner: object) -> None:
        """In the context of the task that calls ``__aexit__`` or ``release_async``: the coroutine that disarms
        may run in a copy of it (``asyncio.shield``, a release off the loop), and this context must not hand the
        stopper of an ended hold to the threads the task starts afterwards."""
        if self._stops:
            note_disarmed(self._top_stoppers(owner))

    def _forget_stops(self, owner: object) -> None:
        """After the pop of ``owner``'s innermost hold: drop the stoppers deeper than what is left."""
        with self._mine_lock:
            stops = self._stops.get(owner)
            if stops is None:
                return
            depth = len(self._mine.get(owner, ()))
            kept = [(d, s) for d, s in stops if d <= depth]
            for d, s in stops:
                if d > depth and s in s.hold.stoppers:
                    s.hold.stoppers.remove(s)
            if kept:
                self._stops[owner] = kept
            else:
                del self._stops[owner]

    # -- async with --

    def _leave_async(self, exc_type: type | None) -> BaseException | None:
        """At the start of ``__aexit__``, on the loop: disarm, and say what the ``async with`` raises.

        Our own cancellation becomes LockLost; an outside cancellation as well stays a CancelledError.
        """
        stoppers = self._disarm_top(owners.current_owner())
        fired = next((s for s in stoppers if s.cancel_sent), None)
        if fired is None:
            return None
        task = fired.task
        assert task is not None  # noqa: S101 - cancel_sent is only set with a task
        pending = getattr(task, "_must_cancel", False)  # requested, not yet thrown into the body
        remaining = task.uncancel()
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            return None if remaining > 0 else fired.lost_error()
        if pending:
            # The body ended before the cancellation reached it: it must not reach the caller's code either.
            if remaining == 0:
                setattr(task, "_must_cancel", False)  # noqa: B010 - Python < 3.13: uncancel() leaves it pending
            return None
        # The body caught the cancellation and ended normally: the caller still learns that the lock was lost.
        return fired.lost_error() if remaining == 0 else None

    # -- max_hold --

    def _schedule_cap(self, hold: Hold, cap: float) -> None:
        left = max(0.0, hold.acquired_at + cap - time.monotonic())
        worker_threads.get().call_later(left, lambda: self._end_at_cap(hold))

    def _end_at_cap(self, hold: Hold) -> None:
        """On the worker thread: the hold reached max_hold. It ends as a loss; the node goes with its release
        mark. A stopped holder deletes it in its own release, once its work has stopped; a holder that is only
        notified loses the node now."""
        if hold.count <= 0 or hold.lost:
            return
        stopping = any(s.armed for s in hold.stoppers)
        if stopping:
            hold.mark_lost("max_hold")
            return
        hold.mark_lost("max_hold")
        hold.session.remove_hold(hold)
        hold.released = True
        self._release_hold(hold, wait=False)
