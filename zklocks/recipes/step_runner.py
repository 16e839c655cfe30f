"""One algorithm, two ways to wait: the queue recipe is written once, as a generator of *steps* (an answer, a request
retried through connection loss, a listing, a wake-up from a watch), driven either by a thread (:func:`run`) or by
an event loop (:func:`run_async`), where a waiting coroutine holds no thread (docs/locks.md, "Async").

The loop driver also coalesces listings: every contender that enqueued on a lock node in the same turn of the
loop shares one ``get_children`` sent after all their creates (one session answers in order), instead of each
reading a list that grows with the queue.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError

from .. import forking
from ..client.interrupts import new_event, unmasked
from ..client.session import Session
from . import gate
from .kazoo_calls import (
    Deadline,
    DeadlinePassed,
    SessionGone,
    answer_limits,
    call,
    children_of,
    given_up,
    outcome,
    overdue,
    silence_check,
    wait_result,
)

Steps = Generator["Step", Any, Any]


class Step:
    __slots__ = ()


class Answer(Step):
    """The answer of a request already sent (``wait_result``): its value, or its error."""

    __slots__ = ("result", "session", "deadline")

    def __init__(self, result, session: Session, deadline: Deadline) -> None:
        self.result, self.session, self.deadline = result, session, deadline


class Request(Step):
    """An idempotent request, sent again after a connection loss (``call``)."""

    __slots__ = ("make", "session", "deadline")

    def __init__(self, make: Callable[[], Any], session: Session, deadline: Deadline) -> None:
        self.make, self.session, self.deadline = make, session, deadline


class Listing(Step):
    """The children of ``parent``, read by a request sent after every create this contender sent."""

    __slots__ = ("parent", "session", "deadline")

    def __init__(self, parent: str, session: Session, deadline: Deadline) -> None:
        self.parent, self.session, self.deadline = parent, session, deadline


class Settle(Step):
    """Wait at most ``limit`` seconds for a request's answer, whatever it is."""

    __slots__ = ("result", "limit")

    def __init__(self, result, limit: float) -> None:
        self.result, self.limit = result, limit


class Pace(Step):
    """Before a burst of requests: the loop driver waits while the session has more than ``gate.IN_FLIGHT``
    requests unanswered. One connection answers in order, so the lease's own renewals (lease.py) never queue
    behind more than that many, however many coroutines start at once. A thread goes on at once."""

    __slots__ = ("session", "deadline")

    def __init__(self, session: Session, deadline: Deadline) -> None:
        self.session, self.deadline = session, deadline


class NewWaker(Step):
    """A waker: an object with a thread-safe ``set()``, for watches and session state changes to call."""

    __slots__ = ()


class Sleep(Step):
    """Wait until ``waker`` is set or ``timeout`` seconds pass (None: no limit); the value is whether it was set.

    A thread also wakes every ``check`` seconds, for the recipe to look at its session: a blocked thread has no
    other way to learn of a silent loss. A coroutine is woken by the session itself (Session.waking).
    """

    __slots__ = ("waker", "timeout", "check")

    def __init__(self, waker, timeout: float | None, check: float) -> None:
        self.waker, self.timeout, self.check = waker, timeout, check


class Blocking(Step):
    """Call ``fn``, which may block (start a session, wait out an outage). ``fast``, if given, is tried first
    and never blocks: a value other than None spares the loop driver a thread."""

    __slots__ = ("fn", "fast")

    def __init__(self, fn: Callable[[], Any], fast: Callable[[], Any] | None = None) -> None:
        self.fn, self.fast = fn, fast


def reconnected(session: Session, deadline: Deadline) -> Blocking:
    """Wait for the connection to come back (a thread for the loop driver: only during an outage); ZkUnavailable
    once the call's outage bound passes (Session.wait_connected)."""
    return Blocking(lambda: session.wait_connected(deadline), fast=lambda: True if session.connected else None)


# -- driving by a thread --


def run(steps: Steps) -> Any:
    """Drive ``steps`` in the calling thread, blocking on each step."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = _perform(step)
        except BaseException as exc:  # noqa: BLE001 handed to the recipe, which cleans up and re-raises
            error = unmasked(exc)  # a signal handler's exception, not threading's RuntimeError that hides it


def _perform(step: Step) -> Any:
    if isinstance(step, Answer):
        return wait_result(step.result, step.session, step.deadline)
    if isinstance(step, Request):
        return call(step.session, step.make, step.deadline)
    if isinstance(step, Listing):
        client = step.session.client
        return call(step.session, lambda: children_of(client, step.parent), step.deadline)
    if isinstance(step, Sleep):
        step.waker.wait(step.check if step.timeout is None else min(step.timeout, step.check))
        return step.waker.is_set()
    if isinstance(step, NewWaker):
        return new_event()
    if isinstance(step, Settle):
        step.result.wait(step.limit)
        return None
    if isinstance(step, Blocking):
        return step.fn()
    if isinstance(step, Pace):
        return None
    raise TypeError(f"not a step: {step!r}")


# -- driving by an event loop --


async def run_async(steps: Steps) -> Any:
    """Drive ``steps`` on the running event loop, awaiting each step; no thread waits for it."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = await _perform_async(step)
        except BaseException as exc:  # noqa: BLE001 a cancellation too: the recipe gives back its node and re-raises
            error = exc


async def _perform_async(step: Step) -> Any:
    if isinstance(step, Answer):
        return await _answer(step.result, step.session, step.deadline)
    if isinstance(step, Request):
        return await _request(step.make, step.session, step.deadline)
    if isinstance(step, Listing):
        return await _listing(step)
    if isinstance(step, Sleep):
        return await step.waker.wait(step.timeout)
    if isinstance(step, NewWaker):
        return LoopWaker(asyncio.get_running_loop())
    if isinstance(step, Settle):
        await _within(_future(step.result), step.limit)
        return None
    if isinstance(step, Pace):
        return await gate.pace(step.session, step.deadline)
    if isinstance(step, Blocking):
        if step.fast is not None:
            value = step.fast()
            if value is not None:
                return value
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_blocking_pool(), contextvars.copy_context().run, step.fn)
    raise TypeError(f"not a step: {step!r}")


def _future(async_result) -> asyncio.Future:
    """An asyncio future completed (on this loop) with a kazoo async result's outcome."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result) -> None:
        if not future.done():
            future.set_result(result)  # the kazoo result itself: outcome() reads it

    def on_done(result) -> None:  # on kazoo's completion thread
        try:
            loop.call_soon_threadsafe(settle, result)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits this any more

    async_result.rawlink(on_done)
    return future


async def _within(future: asyncio.Future, limit: float | None) -> bool:
    """Wait for ``future`` at most ``limit`` seconds (None: no limit); whether it is done. A cancellation of the
    caller is never lost, even when it meets the future's completion (``asyncio.timeout``, unlike ``wait_for``
    before Python 3.12, never swallows it), and never cancels the future, which others may share."""
    if not future.done():
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(future)
        except TimeoutError:
            pass
    return future.done()


async def _answer(async_result, session: Session, deadline: Deadline) -> Any:
    await _settled(_future(async_result), session, deadline)
    return outcome(async_result, session)


async def _settled(future: asyncio.Future, session: Session, deadline: Deadline) -> None:
    """``wait_result``'s rule on the loop: the answer, or ZkUnavailable; never a timeout without an answer."""
    first, rest = answer_limits(session, deadline)
    if not await _answered(future, session, first, deadline):
        overdue(session, deadline, finally_=rest <= 0)
        if not await _answered(future, session, rest, deadline):
            overdue(session, deadline, finally_=True)


async def _answered(future: asyncio.Future, session: Session, limit: float, deadline: Deadline) -> bool:
    """``kazoo_calls.answered`` on the loop: False sooner once the answer is given up (kazoo_calls.given_up)."""
    end = time.monotonic() + limit
    step = silence_check(session)
    while not await _within(future, max(0.0, min(end - time.monotonic(), step))):
        if given_up(session, end, deadline):
            return False
    return True


async def _request(make: Callable[[], Any], session: Session, deadline: Deadline) -> Any:
    late_tries = 0  # as in kazoo_calls.call: one more try after a reconnect past the deadline
    while True:
        if session.dead:
            raise SessionGone()
        try:
            return await _answer(make(), session, deadline)
        except (ConnectionLoss, OperationTimeoutError):
            if not session.connected:
                await asyncio.get_running_loop().run_in_executor(_blocking_pool(), session.wait_connected, deadline)
            if deadline.final():
                raise DeadlinePassed() from None
            if deadline.expired():
                late_tries += 1
                if late_tries > 1:
                    raise session.unavailable("the connection kept dropping past the call's timeout") from None


class LoopWaker:
    """A waker for the loop driver: ``set()`` may be called from any thread."""

    __slots__ = ("loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()

    def set(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self._set)
        except RuntimeError:
            pass  # the loop is closed

    def _set(self) -> None:
        if not self.future.done():
            self.future.set_result(True)

    def is_set(self) -> bool:
        return self.future.done()

    async def wait(self, timeout: float | None) -> bool:
        return await _within(self.future, timeout)


class _Batch:
    """Contenders that share one listing of one lock node: each sent its create before the listing is sent."""

    __slots__ = ("futures", "step")

    def __init__(self, step: Listing) -> None:
        self.futures: list[asyncio.Future] = []
        self.step = step


class _Listings:
    """Per event loop, per (session, lock node): the open batch (not sent yet) and whether a listing is in
    flight. One listing at a time: contenders that arrive while one is answered join the next, sent when it
    comes back, so a burst of creates costs a few listings, not one each (each of thousands of children)."""

    __slots__ = ("open", "flying")

    def __init__(self) -> None:
        self.open: dict[tuple[Session, str], _Batch] = {}
        self.flying: set[tuple[Session, str]] = set()


# Per event loop (weakly: a closed loop's id may be reused by the next one).
_open_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listings] = weakref.WeakKeyDictionary()


async def _listing(step: Listing) -> list[str]:
    """Join (or open) the next batch for this session and lock node; it is sent once every contender of this
    turn of the loop has sent its create, or when the listing in flight comes back."""
    loop = asyncio.get_running_loop()
    listings = _open_batches.get(loop)
    if listings is None:
        listings = _open_batches[loop] = _Listings()
    key = (step.session, step.parent)
    batch = listings.open.get(key)
    if batch is None:
        batch = listings.open[key] = _Batch(step)
        if key not in listings.flying:
            loop.call_soon(_send_listing, listings, key)
    future = loop.create_future()
    batch.futures.append(future)
    try:
        result = await _answer_shared(future, step)
    except (ConnectionLoss, OperationTimeoutError):
        return await _request(lambda: children_of(step.session.client, step.parent), step.session, step.deadline)
    finally:
        # Cancelled, or given up: the batch skips a done future, so no error is set on it that nobody would read
        # (asyncio logs those as never retrieved).
        future.cancel()
    return result


def _send_listing(listings: _Listings, key: tuple[Session, str]) -> None:
    if key in listings.flying:
        return  # the open batch is sent when the one in flight comes back
    batch = listings.open.pop(key, None)
    if batch is None:
        return
    futures = [f for f in batch.futures if not f.done()]
    if not futures:
        return
    session = batch.step.session
    if session.dead:
        for f in futures:
            f.set_exception(SessionGone())
        return
    listings.flying.add(key)
    loop = asyncio.get_running_loop()

    def settle(result) -> None:
        listings.flying.discard(key)
        for f in futures:
            if not f.done():
                f.set_result(result)
        if key in listings.open:
            _send_listing(listings, key)

    def on_done(result) -> None:
        try:
            loop.call_soon_threadsafe(settle, result)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    try:
        children_of(session.client, batch.step.parent).rawlink(on_done)
    except BaseException:
        listings.flying.discard(key)
        raise


async def _answer_shared(future: asyncio.Future, step: Listing) -> list[str]:
    await _settled(future, step.session, step.deadline)
    return outcome(future.result(), step.session)


# Threads for the rare blocking step of an async acquire (starting a session, waiting out an outage).
BLOCKING_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _blocking_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=BLOCKING_THREADS, thread_name_prefix="zklocks-async-blocking")
        return _pool


def reset_after_fork() -> None:
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()
    _open_batches.clear()


forking.register(reset_after_fork)
