"""What every lock handle shares: per-owner holds and reentrancy, the read-only properties, loss, ``on_lost`` and
``max_hold`` (a stopper armed when an acquire succeeds and disarmed first thing in the release, stopping.py), and
the context-manager, decorator and async protocols. The handles: locks.py, semaphores.py, election.py.

A handle may be shared by threads: each owner (a thread, or an asyncio task for ``async with``) has its own
hold (hold_registry.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Self, Unpack

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from .. import owners, signals
from ..client import interrupts, observe, worker_threads
from ..client.deadline import Deadline
from ..client.pools import connections
from ..exceptions import (
    LockLost,
    LockNotAcquired,
    LockOwnershipError,
    LockTimeout,
    ZkUnavailable,
)
from ..names import join_path, validate_name
from ..owners import current_owner
from ..recipes import step_runner
from ..recipes.kazoo_calls import translate
from ..recipes.layout import Kind
from ..recipes.node import layout_of
from ..recipes.step_runner import Steps
from . import hold_registry
from .acquire_base import Acquirable
from .async_bridge import acquire_off_loop, run_off_loop
from .decorator import F, decorate
from .hold_registry import Grant, Hold
from .on_commit import release_after_commit
from .options import HandleOptions, resolved
from .stopping import Stopper, lost_after_body, note_armed, note_disarmed

# How long a release of a contended hold waits for its delete's answer (``release()`` without ``wait``). The waiter
# it frees is notified at that moment; our next requests, sent only then, do not share the server's commit and the
# machine's CPU with that handoff (docs/design.md, "A contended release"). Short, so that a server that stopped
# answering costs a release no more than this.
CONTENDED_RELEASE_SETTLE = 0.1
# Set inside no_settling(): the releases of a give-back or of a task being stopped do not wait.
_not_settling: contextvars.ContextVar[bool] = contextvars.ContextVar("zklocks_not_settling", default=False)


def _settles(hold: Hold) -> bool:
    """Whether ``hold``'s release without ``wait`` waits for its answer: only a hold that queued behind another,
    released by a thread that may block (not an event loop's), on a session that is up and answering."""
    contender, session = hold.contender, hold.session
    if not contender.waited or hold.lost or _not_settling.get():
        return False
    # An event loop's thread, or a thread releasing for an asyncio task or on commit (a pool's: it serves others)
    if interrupts.running_loop() is not None or owners.acting_for_another():
        return False
    return session.connected and not session.unresponsive


@contextlib.contextmanager
def no_settling() -> Iterator[None]:
    """Releases in the block do not wait for their answers: what a failed acquire gives back, whose error is due,
    and what a task being stopped gives back."""
    with interrupts.set_within(_not_settling, True):
        yield


def settle_releases(*answers: Any) -> None:
    """Wait for the answers of contended releases (``_release``'s values), CONTENDED_RELEASE_SETTLE at most in all.
    Called once a release is complete and reported: an exception raised here (a signal handler's) finds nothing
    left to do."""
    end = time.monotonic() + CONTENDED_RELEASE_SETTLE
    for answer in answers:
        if answer is not None:
            answer.wait(max(0.0, end - time.monotonic()))


class BaseHandle(Acquirable):
    """Shared machinery: per-owner holds, properties, context-manager, decorator and async protocols."""

    kind: str = Kind.EXCLUSIVE
    api_name = ""  # the factory that makes this kind of handle, named by the errors of its options
    on_lost: str = "notify"  # see _arm, and stopping.py
    max_hold: float | None = None
    # SingleExecutionTask's "terminate": what ends the worker process (celery/terminate.py)
    terminate: Callable[[Stopper], None] | None = None

    def __init__(self, name: str, **options: Unpack[HandleOptions]) -> None:
        self.name = validate_name(name)
        values = resolved(options, self.api_name or type(self).__name__)
        self.timeout: float | None = values["timeout"]
        self.blocking: bool = values["blocking"]
        self.using: str = values["using"]
        self.release_on_commit: bool | str = values["release_on_commit"]
        self.on_lost, self.max_hold = values["on_lost"], values["max_hold"]
        self._hold_nothing()

    def _hold_nothing(self) -> None:
        """The handle's per-owner state, empty (a new handle, or a clone)."""
        self._mine: dict[object, list[Hold]] = {}  # owner -> holds, innermost last
        self._mine_lock = threading.Lock()
        self._stops: dict[object, list[tuple[int, Stopper]]] = {}  # owner -> (stack depth, stopper): on_lost

    # -- to be provided by subclasses --

    # Whether ``async with`` waits on the event loop itself (recipes/step_runner.py) rather than in a thread.
    waits_on_loop = False

    def _hold_steps(self, blocking: bool, deadline: Deadline, grant: Grant) -> Steps:
        """Take the lock, as steps (hold_registry.take_hold_steps); record in ``grant`` what is taken as soon as
        it is (see hold_registry.Grant). Handles that cannot wait on the loop run them in a thread (async_bridge.py)."""
        raise NotImplementedError

    def _release_hold(self, hold: Hold, wait: bool) -> Any:
        """Delete ``hold``'s node. The value: what to wait on for the answer of a contended release
        (``settle_releases``), or None."""
        contender = hold.contender
        # A holder that waited is in a contended queue: its delete tells the next contender that it held, which
        # spares that contender a read of the queue (recipes/node.py, _send_delete).
        lay = layout_of(contender.session)
        held = contender.waited and lay.marks_release(contender.marker)
        if getattr(contender, "lock_delay", 0) > 0 and lay.holders_write:
            held = True  # under a lock-delay every release is marked: an unmarked delete is a loss (lock_delay.py)
        # A clean release hands the lock to a waiter of our own session behind it at once (client/successors.py).
        # Not a lost hold's: its waiters hear of it from ZooKeeper, as anyone else's do. Nor one whose release
        # clears a lock-delay guard in the lock node: sent again after a connection loss, that clearing could
        # land after the next holder wrote its own guard.
        sent = None if hold.lost or contender.guards else contender.session.hand_over
        if wait:
            contender.delete(Deadline(hold.session.cfg.connect_timeout), held=held, sent=sent)
            return None
        return contender.delete_nowait(held=held, sent=sent, settle=_settles(hold))

    @property
    def path(self) -> str:
        return join_path(connections[self.using].cfg.namespace, self.name)

    def _clone(self, name: str) -> Self:
        """This handle on ``name``, with all its options and holding nothing (the decorator's handle per call, a
        multi-lock's member)."""
        clone = copy.copy(self)
        clone.name = validate_name(name)
        clone._check_name()
        clone._hold_nothing()
        return clone

    def _check_name(self) -> None:
        """What a kind of handle checks in a name beyond validate_name."""

    # -- acquire / release --

    def _acquire(
        self,
        blocking: bool | None,
        timeout: float | None,
        cancel: threading.Event | None = None,
        call: Deadline | None = None,
    ) -> None:
        step_runner.run(self._acquire_steps(blocking, timeout, cancel, call))
        if self._arming_here():
            self._arm()

    async def _acquire_async(self, blocking: bool | None, timeout: float | None) -> None:
        owners.note_acquire_attempt()
        if not self.waits_on_loop:
            await acquire_off_loop(self, blocking, timeout)
        else:
            await step_runner.run_async(self._acquire_steps(blocking, timeout, None, None, on_loop=True))
        owners.note_async_holder()
        self._arm()

    def _acquire_steps(
        self,
        blocking: bool | None,
        timeout: float | None,
        cancel: threading.Event | None,
        call: Deadline | None,
        on_loop: bool = False,
    ) -> Steps:
        """The whole acquire, as steps (recipes/step_runner.py): a thread or the event loop drives it."""
        blocking, deadline, once = self._start(blocking, timeout, cancel, call, on_loop)
        started = time.monotonic()
        if deadline.cancelled():  # an async call cancelled before a thread took it up
            raise LockTimeout(
                f"{self.kind} lock {self.name!r} (alias {self.using!r}) not acquired within the timeout", name=self.name
            )
        grant = Grant()
        owner: object | None = None
        depth: int | None = None
        attempt = observe.acquire_started(self.using, self.kind, self.name)
        try:
            try:
                hold = yield from self._hold_steps(blocking and not once, deadline, grant)
            except (ZkUnavailable, KazooException, KazooTimeoutError) as exc:
                raise self.named_error(exc) from exc
            except LockNotAcquired as exc:
                if once and not isinstance(exc, LockTimeout):
                    raise LockTimeout(
                        f"{self.kind} lock {self.name!r} (alias {self.using!r}) is held elsewhere "
                        "(timeout=0: one attempt)",
                        name=self.name,
                    ) from None
                raise
            owner = current_owner()
            with self._mine_lock:
                stack = self._mine.setdefault(owner, [])
                depth = len(stack)
                stack.append(hold)  # nothing can interrupt between the depth and the append
            observe.acquired(attempt, hold)
            if hold.count == 1:
                signals.send_async(
                    signals.lock_acquired,
                    sender=type(self),
                    name=self.name,
                    alias=self.using,
                    kind=hold.kind,
                    token=hold.token,
                    wait_time=time.monotonic() - started,
                )
        except BaseException as exc:
            observe.acquire_failed(attempt, exc)
            # Whatever arrived after the grant (even asynchronously) must not leave a node nobody releases.
            if owner is not None:
                with self._mine_lock:
                    mine = self._mine.get(owner)
                    if mine is not None:
                        if depth is not None:
                            del mine[depth:]
                        if not mine:
                            del self._mine[owner]
            grant.give_back()
            raise

    def release(self, wait: bool = False) -> None:
        """Release (the outermost release frees the lock). Idempotent; never raises for a lost lock.

        The delete is sent without waiting for its answer: this session's later requests see it applied, and
        other clients see the node gone one round trip later. A hold that queued behind another waits for the
        answer up to CONTENDED_RELEASE_SETTLE once released (docs/design.md, "A contended release waits for its
        answer, briefly", says where it does not). ``wait=True`` waits for the server's answer.

        Ownership (docs/reference.md): the owner that acquired (a thread, or the asyncio task under ``async
        with``) releases. Work started from the holding task's context releases on its behalf: a new task of
        ``asyncio.wait_for`` (Python 3.11) or ``asyncio.shield``, a thread of ``asyncio.to_thread``. Any other
        thread or task that holds nothing through this handle gets LockOwnershipError while someone else holds
        through it (never a silent no-op that leaves the lock held); when nobody does, a release does nothing.
        """
        # An exception (a signal handler's) that lands before anything was released: the release is done all
        # the same, then the exception goes on. Inline, not in a helper: a call's first instruction can take it.
        released = [False]
        try:
            answer = self._release(wait, released)
        except LockOwnershipError:
            raise
        except BaseException:
            if not released[0]:
                with contextlib.suppress(LockOwnershipError):  # the first exception is the one to see
                    self._release(wait, released)
            raise
        settle_releases(answer)

    def _release(self, wait: bool, released: list[bool]) -> Any:
        """Release once for the caller; the value is ``_end_hold``'s (None unless the lock was freed)."""
        owner = current_owner()
        if self._stops:  # first of all: no checkpoint of the holder raises after this (stopping.py)
            self._disarm_top(owner if owner in self._mine else owners.releasing_for() or owner)
        hold: Hold | None = None
        last = False
        try:
            with self._mine_lock, hold_registry.registry_lock:
                stack = self._mine.get(owner)
                if not stack:
                    holder = owners.releasing_for()
                    stack = self._mine.get(holder) if holder is not None else None
                    if stack:
                        owner = holder
                    elif not self._mine:
                        released[0] = True
                        return None  # nobody holds through this handle: a release is idempotent
                    else:
                        raise LockOwnershipError(
                            f"{self.kind} lock {self.name!r} (alias {self.using!r}) was released by a thread or "
                            "task that does not hold it, so it stays held by its owner. Release from the owner "
                            "that acquired, from a thread it starts (asyncio.to_thread), or through a coroutine "
                            "the owner created (`lock.__aexit__(...)`, `lock.release_async()`)",
                            name=self.name,
                        )
                # The bookkeeping is one stretch without a call or a backward jump, where CPython never runs a
                # signal handler: a handler's exception lands before it (nothing is released: the caller runs
                # it again) or after it (the hold is off every record, and the except below removes its node).
                hold = stack[-1]
                del stack[-1]
                if not stack:
                    del self._mine[owner]
                hold.count -= 1
                last = hold.count == 0
                key = hold.key
                if last and key is not None and key in hold_registry.registry and hold_registry.registry[key] is hold:
                    del hold_registry.registry[key]
                released[0] = True
            if self._stops:
                self._forget_stops(owner)
            if last:
                return self._end_hold(hold, wait)
            return None
        except BaseException:
            if last and hold is not None:  # raised mid-release (a signal handler's): the node goes all the same
                hold.session.remove_hold(hold)
                hold.contender.abandon()
                observe.released(hold)
            raise

    def named_error(self, exc: BaseException) -> BaseException:
        """``exc`` as the error a user of this lock sees: kazoo's errors translated, and the lock named."""
        if isinstance(exc, (KazooException, KazooTimeoutError)):
            exc = translate(exc, self.using, f"acquire {self.kind} lock {self.name!r}")
        text = str(exc)
        if isinstance(exc, ZkUnavailable) and repr(self.name) not in text:
            prefix = f"zklocks alias {self.using!r}: "
            rest = text[len(prefix) :] if text.startswith(prefix) else text
            named = ZkUnavailable(f"zklocks alias {self.using!r}, {self.kind} lock {self.name!r}: {rest}")
            named.__cause__ = exc.__cause__
            return named
        return exc

    def _end_hold(self, hold: Hold, wait: bool) -> Any:
        """The last release of ``hold``: its node goes, and the release is reported. The value is
        ``_release_hold``'s, for the caller to wait on once the release is done (``settle_releases``)."""
        hold.session.remove_hold(hold)
        answer = None
        # A hold ended by max_hold whose holder was stopped: its node goes as cleanly as in any release.
        clean = hold.lost_reason == "max_hold" and not hold.released and not hold.session.dead
        if not hold.lost or clean:
            answer = self._release_hold(hold, wait)
            hold.released = hold.lost
        if hold.lost and not hold.released:
            # Lost, but our node may still be there (written by someone else: "changed"): it must go, or the
            # contenders behind it wait for our session to end. Gone already or with its session: nothing to do.
            hold.contender.abandon()
        observe.released(hold)
        signals.send_async(
            signals.lock_released,
            sender=type(self),
            name=self.name,
            alias=self.using,
            kind=hold.kind,
            token=hold.token,
            held_time=time.monotonic() - hold.acquired_at,
        )
        return answer

    # -- what the holder sees --

    def _hold(self, strict: bool = False) -> Hold | None:
        """The caller's innermost hold. For the read-only properties, a caller that holds nothing sees the
        only holder of this handle if there is exactly one (e.g. a monitoring thread)."""
        owner = current_owner()
        with self._mine_lock:
            stack = self._mine.get(owner)
            if not stack and not strict and len(self._mine) == 1:
                stack = next(iter(self._mine.values()))
        return stack[-1] if stack else None

    @property
    def token(self) -> int | None:
        """Fencing token: the czxid of our node, strictly increasing over successive holders of the name while
        ZooKeeper keeps its data (a wiped ensemble counts zxids from the start again)."""
        hold = self._hold()
        return None if hold is None else hold.token

    @property
    def is_held(self) -> bool:
        """False from the moment the server could have expired our session, or once the lock is known lost."""
        hold = self._hold()
        return hold is not None and hold.is_held

    def ensure_held(self) -> None:
        """Raise LockLost unless we still hold the lock; costs a sync and a read to catch a force-release."""
        hold = self._hold(strict=True)
        if hold is None:
            raise LockLost(
                f"lock {self.name!r} (alias {self.using!r}) is not held by this thread or task",
                name=self.name,
                alias=self.using,
                reason="not held",
            )
        try:
            hold.check_node()
        except ZkUnavailable as exc:
            raise self.named_error(exc) from exc.__cause__
        except (KazooException, KazooTimeoutError) as exc:
            raise translate(exc, self.using, f"check {self.kind} lock {self.name!r}") from exc
        if not hold.is_held:
            raise LockLost(name=self.name, alias=self.using, reason=hold.lost_reason or "suspended")

    # -- context manager --

    def _holds_now(self) -> int:
        with self._mine_lock:
            return len(self._mine.get(current_owner(), ()))

    def _give_back(self, before: object) -> None:
        with no_settling():
            while self._holds_now() > before:  # type: ignore[operator]
                self.release()

    def __exit__(self, exc_type, exc, tb) -> None:
        # finally: a signal handler's exception raised in the disarm must not leave the hold taken (it would stay
        # in this thread's registry, and the next acquire of the name would find it lost).
        released = [False]
        stoppers: list = []
        try:
            if self._stops:  # the body has ended: no checkpoint raises after this (see release)
                stoppers = self._disarm_top(current_owner())
        finally:
            if self.release_on_commit:
                try:
                    release_after_commit(self, self.release_on_commit, released)
                except BaseException:  # e.g. a signal handler's, before the release was handed over: release now
                    if not released[0]:
                        self.release()
                    raise
            else:
                try:  # as in release()
                    answer = self._release(False, released)
                except LockOwnershipError:
                    raise
                except BaseException:
                    if not released[0]:
                        with contextlib.suppress(LockOwnershipError):
                            self._release(False, released)
                    raise
                settle_releases(answer)
        if exc_type is None:
            lost = lost_after_body(stoppers)
            if lost is not None:
                raise lost

    # -- async --

    async def __aenter__(self):
        await self._acquire_async(None, None)
        return self

    def __aexit__(self, exc_type, exc, tb) -> Coroutine[Any, Any, None]:
        # The owner is the task that calls __aexit__ (``async with``, or the owner handing the coroutine to
        # asyncio.shield or wait_for), taken now: the task that later runs the coroutine may be another.
        owner = owners.current_owner()
        self._unlist_top(owner)
        return self._aexit(owner, exc_type, exc, tb)

    async def _aexit(self, owner: object, exc_type, exc, tb) -> None:
        with owners.acting_as(owner):
            lost = self._leave_async(exc_type) if self._stops else None
            if self.waits_on_loop and not self.release_on_commit:
                self.release()  # sends the delete without waiting: nothing here blocks the loop
            else:
                await run_off_loop(self.__exit__, exc_type, exc, tb)
        if lost is not None:
            raise lost from exc  # on_lost="cancel" cancelled the body: the caller sees why

    def release_async(self, wait: bool = False) -> Coroutine[Any, Any, None]:
        """``release`` for coroutines: the same ``wait``, without blocking the event loop. It releases for the
        task that calls it, wherever the coroutine is awaited."""
        owner = owners.current_owner()
        self._unlist_top(owner)
        return self._release_async(owner, wait)

    async def _release_async(self, owner: object, wait: bool) -> None:
        with owners.acting_as(owner):
            if self.waits_on_loop and not wait:
                self.release()
                return
            await run_off_loop(self.release, wait)

    # -- on_lost and max_hold: arming, after a successful acquire --

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

    # -- on_lost: disarming, first thing in a release --

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
            # The owner's record first: a signal handler's exception in the loop below then leaves only a disarmed
            # stopper on its hold (it does nothing if fired), never a stale one that the owner's next with takes
            # for its own (and raises LockLost for a hold that was never lost).
            if kept:
                self._stops[owner] = kept
            else:
                del self._stops[owner]
            for d, s in stops:
                if d > depth and s in s.hold.stoppers:
                    s.hold.stoppers.remove(s)

    # -- on_lost: the end of an async with --

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
        pending = interrupts.cancel_pending(task)  # requested, not yet thrown into the body
        remaining = task.uncancel()
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            return None if remaining > 0 else fired.lost_error()
        if pending:
            # The body ended before the cancellation reached it: it must not reach the caller's code either.
            if remaining == 0:
                # Python < 3.13: uncancel() leaves it pending. The C Task refuses the write: the release goes on.
                interrupts.drop_pending_cancel(task)
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

    # -- decorator --

    def __call__(self, func: F) -> F:
        return decorate(self, func)

    def describe(self) -> tuple[str, str]:
        return f"lock {self.name!r}", self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} using={self.using!r} held={self.is_held}>"
