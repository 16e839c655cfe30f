"""Lock-delay (docs/design.md §15): after an unclean loss (a session expired for real, a force-release) the next
holder holds no earlier than ``lock_delay`` after the holder's node vanished, on the server's clock; a clean
release hands over at once; the delay shuts the lock for every contender, and the admin and the CLI show it."""

from __future__ import annotations

import asyncio
import io
import threading
import time
import uuid

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.urls import reverse

from tests.support.helpers import wait_until
from zklocks import LockNotAcquired, LockTimeout, conf, zk_lock, zk_multi_lock, zk_rw_lock
from zklocks.client.pools import connections
from zklocks.models import Lock
from zklocks.ops import read_model
from zklocks.ops.force_release import force_release

pytestmark = [pytest.mark.zk, pytest.mark.timeout(90)]

DELAY = 2.0
# ZooKeeper stamps in whole milliseconds; the probe after an expiry commits a few ms after the closeSession.
SLACK = 0.15


@pytest.fixture
def aliases(zklocks_settings, zk_server):
    """'default' (the first holder), 'b' and 'c' (contenders): three sessions on one server, as three hosts."""
    alias = zklocks_settings()
    zklocks_settings(EXTRA_ALIASES={"b": dict(alias), "c": dict(alias)})
    return zk_server


class Waiter:
    """Acquire ``handle`` in a thread; record when (monotonic) and the server's clock right after (a probe)."""

    def __init__(self, handle, **kwargs) -> None:
        self.handle = handle
        self.result: object = None
        self.error: BaseException | None = None
        self.at: float | None = None
        self.server_after: float | None = None
        self.done = threading.Event()
        self.release = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(kwargs,), daemon=True)
        self._thread.start()

    def _run(self, kwargs) -> None:
        try:
            self.result = self.handle.acquire(**kwargs)
            self.at = time.monotonic()
            if self.result:
                self.server_after = server_now(self.handle.using)  # a write after the grant: its time is later
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()
        if self.result:
            self.release.wait(60)
            self.handle.release()

    def join(self, timeout: float = 30) -> None:
        assert self.done.wait(timeout), "the acquire did not return"

    def stop(self) -> None:
        self.release.set()
        self._thread.join(30)


def server_now(using: str = "default") -> float:
    """The server's clock, in seconds, as stamped on a write we make now (a probe node, created and deleted)."""
    client = connections[using].session().client
    path = client.create(f"/zklocks-probe-{uuid.uuid4().hex}", b"")
    stat = client.exists(path)
    client.delete(path)
    return stat.ctime / 1000.0


def queued(name: str, count: int) -> None:
    wait_until(lambda: (info := read_model.lock_info("default", name)[0]) and len(info.waiters) >= count, 10)


def delay_recorded(name: str) -> bool:
    info, _ = read_model.lock_info("c", name)
    return info is not None and info.delay_until is not None


def holder_node(name: str) -> str:
    info, _ = read_model.lock_info("default", name)
    return info.holders[0].node


def expire(zk_expire, aliases, using: str = "default") -> tuple[float, float]:
    """Expire ``using``'s session for real; (the server's clock before, and right after, the closeSession)."""
    before = server_now("c")
    zk_expire(aliases.hosts, connections[using].session().client)
    return before, server_now("c")


def test_expired_holder_delays_the_next_holder_by_lock_delay_on_the_servers_clock(aliases, zk_expire):
    holder = zk_lock("job", lock_delay=DELAY)
    assert holder.acquire()
    waiter = Waiter(zk_lock("job", using="b", lock_delay=DELAY), timeout=20)
    try:
        queued("job", 1)
        before, after = expire(zk_expire, aliases)
        waiter.join()
        assert waiter.result is True, waiter.error
        # The grant came after the server's clock read ``after`` - SLACK + DELAY; ``before`` bounds it for sure.
        assert waiter.server_after - after >= DELAY - SLACK
        assert waiter.server_after - before >= DELAY
        assert waiter.server_after - after < DELAY + 3  # and it does hold once the delay is over
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()
        holder.release()


def test_threads_sharing_the_expired_session_wait_the_delay_too(aliases, zk_expire):
    """Holder and waiter are threads of one process: one session, which expires for real. The waiter's node
    vanishes with the holder's, so nobody sees the holder vanish; the waiter still holds only after the delay,
    and writes the record that shuts the lock for everyone else."""
    holder = zk_lock("shared", lock_delay=DELAY)
    assert holder.acquire()
    waiter = Waiter(zk_lock("shared", lock_delay=DELAY), timeout=20)
    try:
        queued("shared", 1)
        before, after = expire(zk_expire, aliases)
        newcomer = zk_lock("shared", using="b", lock_delay=DELAY, blocking=False)
        wait_until(lambda: delay_recorded("shared"), 10)
        assert newcomer.acquire() is False  # the record stands for every contender
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - after >= DELAY - SLACK
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()


def test_force_release_is_an_unclean_loss(aliases):
    holder = zk_lock("report", lock_delay=DELAY)
    assert holder.acquire()
    waiter = Waiter(zk_lock("report", using="b", lock_delay=DELAY), timeout=20)
    try:
        queued("report", 1)
        released = force_release("default", "report")
        after = server_now("c")
        assert [c.node for c in released.deleted]
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - after >= DELAY - SLACK
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()
        holder.release()


def test_clean_release_hands_over_at_once_and_an_expiry_after_it_does_not(aliases, zk_expire):
    # The first holder did not wait: without a lock-delay its release would be a plain delete.
    holder = zk_lock("sync", lock_delay=DELAY)
    assert holder.acquire()
    waiter = Waiter(zk_lock("sync", using="b", lock_delay=DELAY), timeout=20)
    third = None
    try:
        queued("sync", 1)
        before = server_now("c")
        released_at = time.monotonic()
        holder.release()
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.at - released_at < DELAY / 4
        assert waiter.server_after - before < DELAY / 4
        # The same pair, the other way: the holder (now 'b') expires, and 'c' waits the delay out.
        third = Waiter(zk_lock("sync", using="c", lock_delay=DELAY), timeout=20)
        queued("sync", 1)
        zk_expire(aliases.hosts, connections["b"].session().client)
        after = server_now("default")
        third.join()
        assert third.result is True, third.error
        assert third.server_after - after >= DELAY - SLACK
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()
        if third is not None:
            third.stop()


def test_default_is_no_delay(aliases, zk_expire):
    assert conf.alias_config("default").lock_delay == 0.0
    holder = zk_lock("plain")
    assert holder.acquire()
    waiter = Waiter(zk_lock("plain", using="b"), timeout=20)
    try:
        queued("plain", 1)
        _, after = expire(zk_expire, aliases)
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - after < DELAY / 4
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()
        holder.release()


def test_alias_option_and_the_delay_shuts_the_lock_for_everyone(zklocks_settings, zk_server, zk_expire):
    alias = zklocks_settings(LOCK_DELAY=4.0)
    zklocks_settings(LOCK_DELAY=4.0, EXTRA_ALIASES={"b": dict(alias), "c": dict(alias)})
    holder = zk_lock("shut")
    assert holder.acquire()
    # 'b' gives up during the delay; 'c' queued behind it must still wait for the delay's end.
    quitter = Waiter(zk_lock("shut", using="b"), timeout=2.0)
    behind = None
    try:
        queued("shut", 1)
        behind = Waiter(zk_lock("shut", using="c"), timeout=20)
        queued("shut", 2)
        before = server_now("c")
        zk_expire(zk_server.hosts, connections["default"].session().client)
        after = server_now("c")
        quitter.join()
        assert quitter.result is False, quitter.error  # timed out during the delay
        behind.join()
        assert behind.result is True, behind.error
        assert behind.server_after - after >= 4.0 - SLACK
        assert behind.server_after - before >= 4.0
        # The quitter's unmarked delete (about 1.7 s into the delay) did not start the delay again.
        assert behind.server_after - after < 4.0 + 1.2
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        quitter.stop()
        if behind is not None:
            behind.stop()


def test_timeout_during_the_delay_raises_lock_timeout(aliases, zk_expire):
    holder = zk_lock("short", lock_delay=5.0)
    assert holder.acquire()
    waiter = Waiter(zk_lock("short", using="b", lock_delay=5.0, timeout=1.5))
    try:
        queued("short", 1)
        zk_expire(aliases.hosts, connections["default"].session().client)
        started = time.monotonic()
        waiter.join()
        assert waiter.result is False, waiter.error
        assert time.monotonic() - started < 4.0
        # A newcomer during the delay, first in the queue now, waits too: with a short timeout it times out.
        assert zk_lock("short", using="c", lock_delay=5.0).acquire(timeout=0.5) is False
        with pytest.raises(LockTimeout):
            with zk_lock("short", using="c", lock_delay=5.0, timeout=0.5):
                pass
        assert zk_lock("short", using="c", lock_delay=5.0).acquire(blocking=False) is False
        with pytest.raises(LockNotAcquired):
            with zk_lock("short", using="c", lock_delay=5.0, blocking=False):
                pass
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()


@pytest.mark.django_db
def test_admin_and_inspect_show_the_delay(aliases, zk_expire, admin_client):
    holder = zk_lock("shown", lock_delay=4.0)
    assert holder.acquire()
    waiter = Waiter(zk_lock("shown", using="b", lock_delay=4.0), timeout=20)
    try:
        queued("shown", 1)
        zk_expire(aliases.hosts, connections["default"].session().client)
        info = wait_until(lambda: (i := read_model.lock_info("c", "shown")[0]) and i.delay_until and i, 10)
        assert "in lock-delay until" in info.delay_text()
        out = io.StringIO()
        call_command("zklocks_status", "--alias", "c", stdout=out)
        assert "in lock-delay until" in out.getvalue()
        url = reverse("admin:zklocks_lock_change", args=(quote(Lock.make_key("c", info.node)),))
        html = admin_client.get(url).content.decode()
        assert "in lock-delay until" in html
        html = admin_client.get(reverse("admin:zklocks_lock_changelist")).content.decode()
        assert "in lock-delay until" in html
        waiter.join()
        assert waiter.result is True
        assert read_model.lock_info("c", "shown")[0].delay_text() is None  # over
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()


def test_rw_and_multi_locks_take_lock_delay(aliases, zk_expire):
    holder = zk_rw_lock("rw", lock_delay=DELAY).write
    assert holder.acquire()
    waiter = Waiter(zk_multi_lock(["other", "rw"], using="b", lock_delay=DELAY), timeout=20)
    try:
        queued("rw", 1)
        _, after = expire(zk_expire, aliases)
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - after >= DELAY - SLACK
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()


@pytest.mark.parametrize("value", [-1, "3", float("nan"), float("inf"), True, 86_401])
def test_bad_lock_delay_is_a_value_error(value):
    with pytest.raises(ValueError, match="lock_delay must be a number of seconds"):
        zk_lock("x", lock_delay=value)


def test_async_waiter_waits_the_delay_out_without_blocking_the_loop(aliases, zk_expire):
    holder = zk_lock("aio", lock_delay=DELAY)
    assert holder.acquire()

    async def waiter():
        async with zk_lock("aio", using="b", lock_delay=DELAY, timeout=20):
            return await asyncio.to_thread(server_now, "b")

    async def ticker(stop):
        ticks = 0
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1
        return ticks

    async def main():
        stop = asyncio.Event()
        ticks = asyncio.create_task(ticker(stop))
        task = asyncio.create_task(waiter())
        await asyncio.to_thread(queued, "aio", 1)
        _, after = await asyncio.to_thread(expire, zk_expire, aliases)
        started = time.monotonic()
        granted = await task
        waited = time.monotonic() - started
        stop.set()
        return after, granted, waited, await ticks

    try:
        after, granted, waited, ticks = asyncio.run(main())
        assert granted - after >= DELAY - SLACK
        assert ticks >= 0.3 * waited / 0.01  # the loop kept running through the delay
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        holder.release()


def test_guarded_alias_clean_handoff_at_once_expiry_delayed(zklocks_settings, zk_server, zk_expire):
    # Under AUTH a marked release is trusted at the notification itself (docs/design.md §5): no look, no delay.
    alias = zklocks_settings(AUTH=[("digest", "ld:secret")], LOCK_DELAY=DELAY)
    zklocks_settings(
        AUTH=[("digest", "ld:secret")], LOCK_DELAY=DELAY, EXTRA_ALIASES={"b": dict(alias), "c": dict(alias)}
    )
    holder = zk_lock("guarded")
    assert holder.acquire()
    waiter = Waiter(zk_lock("guarded", using="b"), timeout=20)
    third = None
    try:
        queued("guarded", 1)
        before = server_now("c")
        holder.release()
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - before < DELAY / 4
        third = Waiter(zk_lock("guarded", using="c"), timeout=20)
        queued("guarded", 1)
        zk_expire(zk_server.hosts, connections["b"].session().client)
        after = server_now("default")
        third.join()
        assert third.result is True, third.error
        assert third.server_after - after >= DELAY - SLACK
    finally:
        holder.release()  # a lost hold left in this thread's registry would meet a later test
        waiter.stop()
        if third is not None:
            third.stop()


def test_a_kazoo_holders_release_is_unmarked_so_it_is_delayed(aliases):
    # kazoo's Lock writes no release mark: its clean release looks like a loss (docs/design.md §15).
    from kazoo.client import KazooClient
    from kazoo.recipe.lock import Lock

    from zklocks import lock_path

    client = KazooClient(hosts=aliases.hosts)
    client.start(10)
    waiter = None
    try:
        klock = Lock(client, lock_path("shared-path"))
        assert klock.acquire(timeout=10)
        waiter = Waiter(zk_lock("shared-path", using="b", lock_delay=DELAY), timeout=20)
        queued("shared-path", 1)
        before = server_now("c")  # a lower bound of the release's time, however slow the machine is
        klock.release()
        waiter.join()
        assert waiter.result is True, waiter.error
        assert waiter.server_after - before >= DELAY - SLACK
    finally:
        if waiter is not None:
            waiter.stop()
        client.stop()
        client.close()


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b'{"lock_delay": 5}',
        b'["lock_delay"]',
        b'{"lock_delay": {"seconds": "5"}}',
        b'{"lock_delay": {"seconds": 1e999}}',
        b'{"lock_delay": {"seconds": -1}}',
        b"\xff lock_delay",
        b'{"lock_delay": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"v":1,"holder":"x__lock__0000000001","acquired_at":1.0}',
    ],
)
def test_foreign_or_hostile_lock_node_data_is_no_delay(raw):
    from zklocks.recipes import lock_delay

    assert lock_delay.until_ms(raw, 1_000) is None


def test_a_record_ends_its_seconds_after_its_writes_mtime():
    from zklocks.recipes import lock_delay

    raw = lock_delay.record("g__lock__0000000007", 2.5)
    assert lock_delay.until_ms(raw, 1_000_000) == 1_002_500
    # The server's clock read 1,001,000 ms at our monotonic 50.0 s: 1,002,500 comes at 51.5 s at the earliest.
    assert lock_delay.ends_at(1_002_500, 1_001_000, 50.0) == 51.5


def test_a_hold_ended_by_max_hold_is_a_clean_release_and_delays_nobody(aliases):
    """max_hold ends a hold as a loss (the body is told) but releases with its mark: the process's next contender
    holds at once, and no delay is recorded."""
    holder = zk_lock("capped", lock_delay=DELAY, max_hold=0.3)
    assert holder.acquire()
    wait_until(lambda: not holder.is_held, 5)
    holder.release()  # the owner leaves its lost hold, as a with statement would
    started = time.monotonic()
    with zk_lock("capped", lock_delay=DELAY, timeout=10):
        assert time.monotonic() - started < DELAY / 2
    assert not delay_recorded("capped")


# -- newcomers: nobody was queued to see the holder go --


def test_a_newcomer_after_a_force_release_with_nobody_queued_waits_the_delay(aliases):
    """The holder's guard in the lock node names a node that is gone without clearing it: the newcomer (another
    session, nobody queued when the node went) starts the delay and waits it out."""

    def lose(holder):
        assert [c.node for c in force_release("default", "alone").deleted]
        return server_now("c")

    a_newcomer_waits_the_delay("alone", lose)


def test_a_newcomer_after_an_expired_holder_with_nobody_queued_waits_the_delay(aliases, zk_expire):
    """As after a kill -9: the holder's session expires for real with nobody queued; a newcomer of another
    session (the holder's process remembers nothing for it) arrives after the node went, and waits."""

    def lose(holder):
        _, after = expire(zk_expire, aliases)
        assert wait_until(lambda: not holder.is_held, 10)
        return after

    a_newcomer_waits_the_delay("expired-alone", lose)


def a_newcomer_waits_the_delay(name, lose):
    """'default' holds ``name`` under a lock-delay and ``lose(holder)`` takes it away uncleanly (returning the
    server's clock after the loss); a newcomer of session 'b', nobody queued before, holds only after the delay."""
    holder = zk_lock(name, lock_delay=DELAY)
    assert holder.acquire()
    newcomer = None
    try:
        after = lose(holder)
        newcomer = Waiter(zk_lock(name, using="b", lock_delay=DELAY), timeout=20)
        newcomer.join()
        assert newcomer.result is True, newcomer.error
        assert newcomer.server_after - after >= DELAY - SLACK
    finally:
        holder.release()
        if newcomer is not None:
            newcomer.stop()


@pytest.mark.parametrize("wait", [False, True], ids=["release()", "release(wait=True)"])
def test_a_clean_release_with_nobody_queued_clears_the_guard(aliases, wait):
    holder = zk_lock("clean-alone", lock_delay=DELAY)
    assert holder.acquire()
    assert read_model.lock_info("c", "clean-alone")[0].holders  # the guard is the hold record the admin reads
    holder.release(wait=wait)
    started = time.monotonic()
    with zk_lock("clean-alone", using="b", lock_delay=DELAY, timeout=10):
        assert time.monotonic() - started < DELAY / 4
    assert not delay_recorded("clean-alone")
    client = connections["c"].session().client
    assert client.get(zk_lock("clean-alone").path)[0] == b""  # the second release cleared its guard too


def test_an_acquire_interrupted_after_its_guard_was_sent_leaves_no_guard(aliases):
    """The acquire is interrupted (a signal handler's exception, or a cancelled coroutine) once its guard was sent,
    before it noted that it guards: the node it gives back takes the guard with it, and the next contender holds
    at once (a guard left behind would make it wait a lock-delay after a hold that never began)."""
    from tests.support.interrupts import interrupted_acquire, raise_at
    from zklocks.recipes import lock_delay

    holder = zk_lock("guard-cut", lock_delay=DELAY)
    tracer, seen = raise_at(lock_delay._guard_steps.__code__, nth=2)  # the generator resumes: the write answered
    box = interrupted_acquire(holder, tracer)
    assert len(seen) == 2 and "interrupted" in box
    client = connections["c"].session().client
    wait_until(lambda: client.get(zk_lock("guard-cut").path)[0] == b"", timeout=5)
    started = time.monotonic()
    with zk_lock("guard-cut", using="b", lock_delay=DELAY, timeout=10):
        assert time.monotonic() - started < DELAY / 4
    assert not delay_recorded("guard-cut")


def test_an_acquire_cut_short_on_a_lock_node_it_may_not_write_gives_its_node_back(aliases):
    """The lock node's ACL lets the alias queue but not write its data (a foreign lock node: no guard is kept).
    The acquire is interrupted as its guard write is answered (refused): the node it gives back goes all the same,
    and the session, with another hold on it, lives on (a release transaction refused as a whole must not end it)."""
    from kazoo.security import ACL, Id, Permissions

    from tests.support.interrupts import interrupted_acquire, raise_at
    from zklocks.recipes import lock_delay

    client = connections["c"].session().client
    path = zk_lock("foreign-node").path
    may_queue = Permissions.READ | Permissions.CREATE | Permissions.DELETE
    client.create(path, b"", acl=[ACL(may_queue, Id("world", "anyone"))], makepath=True)
    other = zk_lock("beside-it")
    assert other.acquire()
    try:
        tracer, seen = raise_at(lock_delay._guard_steps.__code__, nth=2)  # resumed with the refusal
        box = interrupted_acquire(zk_lock("foreign-node", lock_delay=DELAY), tracer)
        assert len(seen) == 2 and "interrupted" in box
        wait_until(lambda: client.get_children(path) == [], timeout=5)
        other.ensure_held()  # the session was not ended for a refused release
        assert other.is_held
    finally:
        other.release()
