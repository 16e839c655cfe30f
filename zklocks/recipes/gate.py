"""The request gate of the loop driver: a burst of coroutines on one session is let go in its order of arrival,
a few hundred requests at a time, so the lease's own renewals never wait behind thousands of answers."""

from __future__ import annotations

import asyncio
import collections
import weakref

from .. import forking
from ..client.deadline import Deadline, DeadlinePassed
from ..client.kazoo_adapter.calls import unanswered
from ..client.session import Session

# Requests a session may have unanswered before the loop driver holds back the next burst (Pace): at a few
# thousand answers a second, a lease renewal waits well under a second behind them.
IN_FLIGHT = 500


def _in_flight(session: Session) -> int:
    return unanswered(session.client)  # sent and unanswered, or not sent yet


def _answering(session: Session) -> bool:
    """Whether requests are being answered. Otherwise nobody is held back: the requests in flight are answered
    by nobody (an outage, a lost session), and each caller's own request meets the outage and its bound (an
    outage is ZkUnavailable within CONNECT_TIMEOUT of it, never a wait at this gate)."""
    return session.connected and not session.unresponsive


class _Gate:
    """The coroutines of one loop held back on one session, in their order of arrival: one task lets them go,
    a few hundred at a time, as the session's requests are answered (and all of them at once on a loop turn,
    so their listings are shared)."""

    __slots__ = ("waiting", "running")

    def __init__(self) -> None:
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        self.running = False

    async def run(self, session: Session) -> None:
        try:
            while self.waiting:
                room = IN_FLIGHT - _in_flight(session)
                if not _answering(session):
                    room = len(self.waiting)
                if room <= 0:
                    await asyncio.sleep(0.002)
                    continue
                for _ in range(max(1, room // 2)):  # a burst is about two requests
                    while self.waiting and self.waiting[0].done():
                        self.waiting.popleft()  # cancelled while held back
                    if not self.waiting:
                        break
                    self.waiting.popleft().set_result(None)
                await asyncio.sleep(0)
        finally:
            self.running = False


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
    if not gate.waiting and (_in_flight(session) <= IN_FLIGHT or not _answering(session)):
        return
    future = loop.create_future()
    gate.waiting.append(future)
    if not gate.running:
        gate.running = True
        loop.create_task(gate.run(session))
    try:
        async with asyncio.timeout(deadline.remaining()):
            await future
    except TimeoutError:
        raise DeadlinePassed() from None  # held back past the caller's deadline (the gate skips our future later)


def reset_after_fork() -> None:
    _gates.clear()


forking.register(reset_after_fork)
