"""``acquire() -> bool`` and the acquire prologue shared by lock handles (base.py) and multi-locks (multilock.py)."""

from __future__ import annotations

import threading

from .. import owners
from ..client.deadline import Deadline
from ..exceptions import LockNotAcquired
from .async_bridge import acquire_off_loop, refuse_in_event_loop


class Acquirable:
    """``acquire() -> bool`` on top of a raising ``_acquire``."""

    blocking: bool
    timeout: float | None

    def _start(
        self,
        blocking: bool | None,
        timeout: float | None,
        cancel: threading.Event | None,
        call: Deadline | None,
        on_loop: bool = False,
    ) -> tuple[bool, Deadline, bool]:
        """What every acquire does first: refuse a blocking call on an event loop's thread, take the handle's
        defaults, and fix the deadline. Returns (blocking, deadline, once); ``once`` is a single attempt
        (``timeout=0``, as with threading.Lock), which has no deadline of its own: its requests are bounded by
        CONNECT_TIMEOUT, like ``blocking=False``, and it never waits behind a holder. ``call`` is the deadline of
        an async call or of a multi-lock, fixed when it was made (not when a thread took it up): its end, and its
        start, from which an outage the call meets is bounded.
        """
        if not on_loop:
            refuse_in_event_loop(self)
        owners.note_acquire_attempt()
        blocking = self.blocking if blocking is None else blocking
        timeout = self.timeout if timeout is None else timeout
        once = blocking and timeout == 0
        deadline = Deadline(None if once or not blocking else timeout, cancel)
        if call is not None:
            deadline.started = call.started
            if not once:
                deadline.at = call.at
        return blocking, deadline, once

    def _acquire(
        self,
        blocking: bool | None,
        timeout: float | None,
        cancel: threading.Event | None = None,
        call: Deadline | None = None,
    ) -> None:
        raise NotImplementedError

    def _holds_now(self) -> object:
        """What the caller holds through this handle, for ``_give_back`` (before an acquire)."""
        raise NotImplementedError

    def _give_back(self, before: object) -> None:
        """Release what the caller took since ``_holds_now`` returned ``before``."""
        raise NotImplementedError

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire; False if held elsewhere (``blocking=False``) or not acquired within ``timeout``."""
        # An exception that lands as ``_acquire`` returns (a signal handler's) finds the lock taken: the caller,
        # who sees the exception and not True, would never release it.
        before = self._holds_now()
        try:
            self._acquire(blocking, timeout)
        except LockNotAcquired:
            return False
        except BaseException:
            self._give_back(before)
            raise
        return True

    def __enter__(self):
        # Whatever it took is given back if an exception comes before the with statement has it (``acquire``'s
        # reason). The try is here, not in a helper: the return from a helper could take the exception.
        before = self._holds_now()
        try:
            self._acquire(None, None)
            return self
        except BaseException:
            self._give_back(before)
            raise

    async def acquire_async(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """``acquire`` for coroutines: the same arguments and result, without blocking the event loop."""
        try:
            await self._acquire_async(blocking, timeout)
        except LockNotAcquired:
            return False
        return True

    async def _acquire_async(self, blocking: bool | None, timeout: float | None) -> None:
        owners.note_acquire_attempt()  # in the task: the acquire thread runs as it, in a copy of its context
        await acquire_off_loop(self, blocking, timeout)
