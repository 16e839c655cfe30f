"""The request gate of the loop driver: a burst of coroutines on one session is let go in its order of arrival,
a few hundred requests at a time, so the lease's own renewals never wait behind thousands of answers."""

from __future__ import annotations

import asyncio
import collections
import weakref

from .. import forking
from ..client.deadline import Deadline
from ..client.kazoo_adapter.calls import unanswered
from ..client.session import Session
from .kazoo_calls import outage_error, overdue

# Requests a session may have unanswered before the loop driver holds back the next burst (Pace): at a few
# thousand answers a second, a lease renewal waits well under a second behind them.
IN_FLIGHT = 500


def _in_flight(session: Session) -> int:
    return unanswered(session.client)  # sent and unanswered, or not sent yet


class _Gate:
    """The coroutines of one loop held back on one session, in their order of arrival: one task lets them go,
    a few hundred at a time, as the session's requests are answered (and all of them at once on a loop turn,
    so their listings are shared). While nothing is answered (an outage), each is held back until its call's
    outage bound at most, and then gets ZkUnavailable, as it would waiting for an answer: the requests ahead are
    answered by nobody, and letting everyone go would send them all at once when a short outage ends."""

    __slots__ = ("waiting", "running")

    def __init__(self) -> None:
        self.waiting: collections.deque[tuple[asyncio.Future, Deadline]] = collections.deque()
        self.running = False

    async def run(self, session: Session) -> None:
        try:
            while self.waiting:
                room = IN_FLIGHT - _in_flight(session)
                if session.dead:
                    room = len(self.waiting)
                elif not session.connected or session.unresponsive:
                    self._fail_past_outage_bound(session)
                    await asyncio.sleep(0.05)
                    continue
                if room <= 0:
                    await asyncio.sleep(0.002)
                    continue
                for _ in range(max(1, room // 2)):  # a burst is about two requests
                    while self.waiting and self.waiting[0][0].done():
                        self.waiting.popleft()  # cancelled, or failed, while held back
                    if not self.waiting:
                        break
                    self.waiting.popleft()[0].set_result(None)
                await asyncio.sleep(0)
        finally:
            self.running = False

    def _fail_past_outage_bound(self, session: Session) -> None:
        for future, deadline in self.waiting:
            if not future.done() and (error := outage_error(session, deadline)) is not None:
                future.set_exception(error)


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Session, _Gate]] = weakref.WeakKeyDictionary()


async def pace(session: Session, deadline: Deadline) -> None:
    """Wait for our turn while the session has more than IN_FLIGHT requests unanswered (step_runner.Pace)."""
    loop = asyncio.get_running_loop()
    gates = _gates.get(loop)
    if gates is None:
        gates = _gates[loop] = {}
    gate = gates.get(session)
    if gate is None:
        gate = gates[session] = _Gate()
    if not gate.waiting and _in_flight(session) <= IN_FLIGHT:
        return
    future = loop.create_future()
    gate.waiting.append((future, deadline))
    if not gate.running:
        gate.running = True
        loop.create_task(gate.run(session))
    try:
        async with asyncio.timeout(deadline.remaining()):
            await future
        return
    except TimeoutError:
        # Held back past the caller's deadline. The gate may have failed it at its outage bound in the same loop
        # turn: that error is the answer (and is retrieved, or asyncio would log it as never retrieved).
        if future.done() and not future.cancelled() and (failed := future.exception()) is not None:
            raise failed from None
    finally:
        future.cancel()  # nobody awaits it any more: the gate skips it (nothing, once it is done)
    if not session.dead:
        overdue(session, deadline, finally_=False)  # an outage is ZkUnavailable, never a lock held elsewhere
    # Held back past its deadline, with nothing answered to back a timeout: the call sends its request now, once,
    # as a thread's would have, and ends in the recipe's judgement of the answer (a lock held elsewhere) or in
    # ZkUnavailable if none comes. Only the calls whose deadline passes go early, spread by their deadlines.


def reset_after_fork() -> None:
    _gates.clear()


forking.register(reset_after_fork)
