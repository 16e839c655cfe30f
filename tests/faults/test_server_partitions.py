"""Servers cut off from each other (not clients from servers): a 3-node ensemble whose quorum and election links
pass through proxies the test owns (``ZkEnsemble(server_links=True)``), with contenders attached to every server.

Each contender uses an alias whose HOSTS is ONE server, so a client on a cut-off server keeps a working
connection to it. For every fault the test records, per lock, each hold's acquire time and the last moment its
holder saw ``is_held`` True and ``ensure_held()`` pass (polled every 5 ms, time.monotonic after the answer),
and asserts:

- exclusion: a hold begins only after every earlier holder last saw the lock as held (the margin is printed);
- progress: if the old holder gave the lock up, another contender acquires it within session timeout + one
  tick + 2 s of the fault's end (for a partition that stays: the moment the majority serves with a leader);
- no orphans: after healing and once every contender has returned, no contender node is left.

A follower cut off from the leader keeps answering its clients for syncLimit ticks, while the leader expires
their sessions (docs/reliability.md; docs/design.md §10): until the lease rule counts only evidence that the leader
saw the session, the holder keeps believing it holds the lock after the next holder got it.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from django.test import override_settings

from tests.support.helpers import raw_client, wait_until
from tests.support.threads import HeldInThread
from zklocks import zk_lock
from zklocks.client.pools import close_all, connections
from zklocks.exceptions import ZkLocksError, ZkUnavailable
from zklocks.handles.locks import lock_path
from zklocks.testing import ZkEnsemble

pytestmark = pytest.mark.timeout(180)

TICK = 200  # ms
SESSION = 4.0
SYNC_LIMIT_S = 10 * TICK / 1000  # syncLimit (10, see ZkServer.write_config) in seconds
BOUND = SESSION + TICK / 1000 + 2.0
POLL = 0.005
WORST: dict[str, float] = {}  # fault -> smallest margin seen (negative: overlap)
WORST_LOST: dict[str, float] = {}  # fault -> smallest margin after a holder that lost its lease to the fault


@pytest.fixture(scope="module")
def ens():
    # start() returns once each server leads or follows on its own ports; a start that lost a port is tried again
    # on fresh ports, and the servers' logs are printed if it still fails (zklocks.testing.server).
    ensemble = ZkEnsemble(3, tick_time=TICK, server_links=True)
    try:
        ensemble.start()
    except BaseException:
        ensemble.cleanup()
        raise
    try:
        yield ensemble
    finally:
        if any(s.proc is None or s.proc.poll() is not None for s in ensemble.servers):
            # No test here stops a server: one that is gone died on its own. Its log goes with the data dir.
            print("\nserver partitions: a server of the ensemble died\n" + ensemble.describe())
        ensemble.cleanup()
        if WORST:
            print(
                "\nserver partitions, worst margin (next acquire - old holder's last True) per fault: "
                + ", ".join(f"{k} {v:+.3f}s" for k, v in WORST.items())
            )
            print(
                "the same, after a holder that lost its lease to the fault: "
                + ", ".join(f"{k} {v:+.3f}s" for k, v in WORST_LOST.items())
            )


@pytest.fixture
def aliases(ens):
    """One alias per server (s0, s1, s2), each with HOSTS = that server only, on one fresh namespace."""
    ens.heal_all()
    ens.wait_ready(60)  # a leader and two followers again, or every server's state and log
    common = {
        "NAMESPACE": f"/server-partitions/{uuid.uuid4().hex[:8]}",
        "SESSION_TIMEOUT": SESSION,
        "CONNECT_TIMEOUT": 2.0,
        "REAP_INTERVAL": 0,
    }
    conf = {f"s{i}": {"HOSTS": s.hosts, **common} for i, s in enumerate(ens.servers)}
    conf["default"] = {"HOSTS": ens.hosts, **common}
    with override_settings(ZKLOCKS=conf):
        try:
            yield [f"s{i}" for i in range(len(ens.servers))]
        finally:
            ens.heal_all()
            close_all()


@dataclass
class Hold:
    who: str
    acquired: float
    last_true: float
    token: int
    lost: bool = False
    released: float | None = None


@dataclass
class Contender:
    """A thread on one alias: acquire ``name``, hold until told to release (or ``hold_for`` elapsed), polling
    ``is_held`` and ``ensure_held()``; stops at once when either says the lock is gone."""

    alias: str
    name: str
    hold_for: float | None = None  # None: until release is set
    acquire_timeout: float = 60.0
    holds: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Contender:
        threading.Thread(target=self.run, name=f"contender-{self.alias}-{self.name}", daemon=True).start()
        return self

    def run(self) -> None:
        try:
            give_up = time.monotonic() + self.acquire_timeout
            lock = zk_lock(self.name, using=self.alias)
            while True:  # a cut-off server stops serving its clients for a while: try again
                try:
                    if lock.acquire(timeout=max(0.1, give_up - time.monotonic())):
                        break
                    self.errors.append("timed out")
                    return
                except ZkUnavailable:
                    if time.monotonic() > give_up:
                        raise
                    time.sleep(0.1)
            now = time.monotonic()
            hold = Hold(self.alias, now, now, lock.token)
            self.holds.append(hold)
            self.holding.set()
            until = None if self.hold_for is None else now + self.hold_for
            stop = threading.Event()
            # is_held is polled by a monitor thread: ensure_held() may wait for an answer (up to
            # CONNECT_TIMEOUT) while is_held still says True.
            monitor = threading.Thread(target=self.watch, args=(lock, hold, stop), daemon=True)
            monitor.start()
            while not (stop.is_set() or self.release.is_set()) and (until is None or time.monotonic() < until):
                try:
                    lock.ensure_held()
                except ZkLocksError:
                    hold.lost = True
                    break
                hold.last_true = max(hold.last_true, time.monotonic())
                time.sleep(POLL)
            stop.set()
            monitor.join()
            hold.released = time.monotonic()
            lock.release()
        except Exception as exc:  # anything else is a failure the test must see
            self.errors.append(repr(exc))
        finally:
            self.done.set()

    @staticmethod
    def watch(lock, hold: Hold, stop: threading.Event) -> None:
        while not stop.is_set():
            if not lock.is_held:
                hold.lost = True
                stop.set()
                return
            hold.last_true = max(hold.last_true, time.monotonic())
            time.sleep(POLL)


def check_exclusion(fault: str, name: str, holds: list[Hold], t0: float, log) -> float:
    """Every hold starts after every earlier holder's last True. Returns the smallest margin."""
    holds = sorted(holds, key=lambda h: h.acquired)
    worst = float("inf")
    for k, b in enumerate(holds[1:], 1):
        last = max(holds[:k], key=lambda h: h.last_true)
        margin = b.acquired - last.last_true
        worst = min(worst, margin)
        if last.lost:
            WORST_LOST[fault] = min(WORST_LOST.get(fault, float("inf")), margin)
        log(
            f"  {fault} {name}: {last.who} last held at +{last.last_true - t0:.3f}s"
            f"{' (lost)' if last.lost else ''}, {b.who} acquired at +{b.acquired - t0:.3f}s: margin {margin:+.3f}s"
        )
    WORST[fault] = min(WORST.get(fault, float("inf")), worst)
    return worst


def run_fault(ens, aliases, fault: str, holders: list[tuple[int, str]], inject, log, *, keep_cut: bool = True):
    """``holders``: (server index, lock name) of the initial holders. Waiters for every name queue on every
    server. ``inject()`` applies the fault and returns the moment it ended (progress is measured from there)."""
    names = sorted({name for _, name in holders})
    first = [Contender(aliases[i], name).start() for i, name in holders]
    for c in first:
        assert c.holding.wait(20), c.errors
    waiters = [Contender(a, name, hold_for=0.2).start() for name in names for a in aliases]
    zk = raw_client(ens.hosts)
    try:
        paths = {name: lock_path(name, using="default") for name in names}
        wait_until(lambda: all(len(zk.get_children(p)) == 1 + len(aliases) for p in paths.values()), timeout=20)
        t0 = time.monotonic()
        ended = inject()
        deadline = ended + BOUND
        # Wait until each old holder has lost the lock and someone else got it, or the progress deadline passed.
        while time.monotonic() < deadline + 0.5:
            if all(c.holds[0].lost for c in first) and all(any(w.holds for w in waiters if w.name == n) for n in names):
                break
            time.sleep(0.05)
        for c in first:
            c.release.set()
        if keep_cut:
            ens.heal_all()
        ens.wait_ready(60)
        for c in first + waiters:
            assert c.done.wait(60), f"{c.alias} {c.name} did not finish"
        # Every contender has returned, sessions still open: no node may be left.
        wait_until(lambda: not any(zk.get_children(p) for p in paths.values()), timeout=5)
    finally:
        zk.stop()
        zk.close()
    for c in first + waiters:
        assert c.errors == [], (c.alias, c.name, c.errors)
    worst = {}
    for name in names:
        holds = [h for c in first + waiters if c.name == name for h in c.holds]
        assert len(holds) == 1 + len(aliases)  # everyone got the lock once
        worst[name] = check_exclusion(fault, name, holds, t0, log)
        old = next(c.holds[0] for c in first if c.name == name)
        if old.last_true < deadline:  # the old holder gave it up: someone else must have it by the deadline
            nxt = min((h.acquired for h in holds if h is not old), default=float("inf"))
            assert nxt <= deadline, (
                f"{fault} {name}: no one acquired within {BOUND:.1f}s of the fault's end (next at +{nxt - ended:.2f}s)"
            )
    for name, margin in worst.items():
        assert margin > 0, (
            f"{fault} {name}: the old holder still saw the lock held {-margin:.3f}s after another contender acquired it"
        )


@pytest.fixture
def log(capsys):
    def write(text: str) -> None:
        with capsys.disabled():
            print(text, flush=True)

    return write


def leader_and_followers(ens) -> tuple[int, list[int]]:
    leader = ens.index(ens.leader())
    return leader, [i for i in range(len(ens.servers)) if i != leader]


def wait_majority_leader(ens, members: list[int], timeout: float = 30.0) -> float:
    """The moment a server of ``members`` leads and the others of them follow: the majority serves again."""

    def ok():
        modes = [ens.servers[i].mode() for i in members]
        return modes.count("leader") == 1 and modes.count("follower") == len(members) - 1

    wait_until(ok, timeout=timeout, interval=0.02)
    return time.monotonic()


def test_server_links_carry_the_ensemble_and_a_cut_follower_stops_serving(ens, aliases):
    """The harness itself: every pair talks through the proxies, and cutting a follower from the leader makes
    it stop serving after syncLimit ticks while the others go on; healing brings it back."""
    conns = ens.links.connections()
    assert all(conns[i, j] + conns[j, i] > 0 for i in range(3) for j in range(3) if i < j), conns
    leader, (f, other) = leader_and_followers(ens)
    ens.cut(f, leader)
    cut = time.monotonic()
    wait_until(lambda: ens.servers[f].mode() is None, timeout=SYNC_LIMIT_S + 3, interval=0.05)
    assert time.monotonic() - cut >= SYNC_LIMIT_S * 0.8
    assert ens.servers[leader].mode() == "leader" and ens.servers[other].mode() == "follower"
    ens.heal(f, leader)
    ens.wait_ready(30)


def test_follower_cut_off_from_the_leader(ens, aliases, log):
    """The holder's server loses the leader but keeps its clients for syncLimit ticks."""
    leader, (f, _) = leader_and_followers(ens)

    def inject():
        ens.cut(f, leader)
        return time.monotonic()  # the leader and the other follower never stop serving

    run_fault(ens, aliases, "follower-cut-off", [(f, "p:follower")], inject, log)


def test_leader_cut_off_from_both_followers(ens, aliases, log):
    leader, followers = leader_and_followers(ens)

    def inject():
        ens.isolate(leader)
        return wait_majority_leader(ens, followers)

    run_fault(ens, aliases, "leader-isolated", [(leader, "p:leader")], inject, log)


def test_minority_majority_split_with_holders_on_both_sides(ens, aliases, log):
    leader, (minority, other) = leader_and_followers(ens)

    def inject():
        ens.split([[minority], [leader, other]])
        return time.monotonic()  # the majority keeps its leader

    run_fault(ens, aliases, "split", [(minority, "p:minority"), (other, "p:majority")], inject, log)


def test_flapping_link_between_a_follower_and_the_leader(ens, aliases, log):
    """The holder's follower loses the leader several times within one session timeout: black-holed and reset
    in turn, 0.6 s each, 0.4 s apart."""
    leader, (f, _) = leader_and_followers(ens)

    def inject():
        for k in range(4):
            ens.cut(f, leader, mode="reset" if k % 2 else "blackhole")
            time.sleep(0.6)
            ens.heal(f, leader)
            time.sleep(0.4)
        return time.monotonic()

    run_fault(ens, aliases, "flapping-link", [(f, "p:flap")], inject, log, keep_cut=False)


# -- mixed session timeouts (a rolling change of maxSessionTimeout) --

LONG_MAX, SHORT_MAX = 20.0, 2.0  # maxSessionTimeout of B and of A, in seconds


def prove_lease(session, gap: float) -> None:
    """One proof of lease.py on the session's current connection, from the test thread: Q1, S2 one relay gap
    later, then S3. Its lease starts at Q1's send time, so the hold survives a move to a server whose shorter
    timeout then counts."""
    client = session.client
    client.exists("/")
    time.sleep(gap + 0.05)
    client.sync("/")
    txn = client.transaction()
    txn.check("/", -1)
    txn.commit()


def test_a_session_back_from_a_server_with_a_shorter_timeout_counts_on_the_shorter_one(log):
    """Servers negotiate different timeouts: B allows 20 s, A 2 s. The holder's session is created on B, moves
    to A (2 s), then back to B (20 s again). A touch of A, relayed late (A's link to the leader is black-holed
    for 0.7 s, less than syncLimit), reaches the leader after B's re-validation, and the leader applies it with
    A's 2 s: with the holder silent, the leader expires the session 2 s later and the next contender acquires.
    The holder's ``is_held`` must be False by then: its lease counts on 2 s, not on B's 20 s."""
    from zklocks.client.pools import connections
    from zklocks.testing.proxy import TcpProxy

    tick = TICK / 1000
    ens = ZkEnsemble(3, tick_time=TICK, server_links=True)
    # A rolling change of maxSessionTimeout: two servers already allow 2 s at most, one still 20 s.
    for s, top in zip(ens.servers, (SHORT_MAX, SHORT_MAX, LONG_MAX), strict=True):
        s.extra["maxSessionTimeout"] = str(int(top * 1000))
    proxy = None
    try:
        ens.start()
        leader = ens.index(ens.leader())
        b = 2
        a = next(i for i in range(3) if i not in (leader, b))  # a follower with the short maximum
        proxy = TcpProxy("127.0.0.1", ens.servers[b].port).start()
        common = {
            "NAMESPACE": f"/mixed-timeouts/{uuid.uuid4().hex[:8]}",
            "SESSION_TIMEOUT": LONG_MAX,
            "CONNECT_TIMEOUT": 2.0,
            "REAP_INTERVAL": 0,
            "TICK_TIME": tick,
        }
        conf = {
            "h": {"HOSTS": proxy.hosts, **common},  # the holder reaches one server at a time, through the proxy
            "c": {"HOSTS": ens.servers[leader].hosts, **common},
            "default": {"HOSTS": ens.hosts, **common},
        }
        with override_settings(ZKLOCKS=conf):
            try:
                # The holder polls is_held only: ensure_held() would send requests of its own (a sync that waits
                # for the leader on A, touches on B), and the test is about what the lease says.
                held = zk_lock("mixed", using="h")
                assert held.acquire(timeout=20)
                old = Hold("h", time.monotonic(), time.monotonic(), held.token)
                stop = threading.Event()
                watcher = threading.Thread(target=Contender.watch, args=(held, old, stop), daemon=True)
                watcher.start()
                session = connections["h"].session()
                assert session.timeout == LONG_MAX  # created on B
                nxt = Contender("c", "mixed", hold_for=0.2).start()
                zk = raw_client(ens.servers[leader].hosts)
                try:
                    path = lock_path("mixed", using="h")
                    wait_until(lambda: len(zk.get_children(path)) == 2, timeout=20)
                finally:
                    zk.stop()
                    zk.close()

                def move_to(i: int) -> None:
                    proxy.target = ("127.0.0.1", ens.servers[i].port)
                    proxy.reset()  # kazoo reconnects with the same session, through the proxy, to server i
                    wait_until(lambda: not session.connected, timeout=5, interval=0.002)
                    assert wait_until(lambda: session.connected, timeout=5, interval=0.002), "no reconnect"

                prove_lease(session, tick)  # the lease must outlive the move to A's 2 s
                move_to(a)
                assert session.timeout == SHORT_MAX and not old.lost
                prove_lease(session, tick)
                t0 = time.monotonic()
                ens.cut(a, leader, one_way=True)  # A's replies to the leader's pings (its touches) are held
                # A touch on A, with A's 2 s, in A's touch table: A touches a session when a request arrives, even
                # if the answer waits behind one of the session's requests that needs the leader.
                session.client.exists_async("/")
                time.sleep(0.1)
                move_to(b)  # re-validated at the leader with B's 20 s
                time.sleep(0.3)  # B's touches reach the leader
                proxy.partition()  # the holder goes silent: nothing of it reaches a server any more
                time.sleep(0.3)  # B relays its last touch of the holder (one leader PING: tickTime/2)
                ens.heal(a, leader)  # A's held touch reaches the leader last: expiry in A's 2 s
                healed = time.monotonic()
                assert healed - t0 < SYNC_LIMIT_S, "the leader dropped A: its touch never arrived"
                assert nxt.holding.wait(SHORT_MAX + 10), nxt.errors
                # Give the holder time to notice; with B's 20 s it would say True for many seconds more.
                noticed_by = time.monotonic() + 3
                while not old.lost and time.monotonic() < noticed_by:
                    time.sleep(POLL)
                stop.set()
                watcher.join(5)
                new = nxt.holds[0]
                log(
                    f"  mixed-timeouts: holder last held at +{old.last_true - healed:.3f}s"
                    f"{' (lost)' if old.lost else ''}, next acquired at +{new.acquired - healed:.3f}s after the "
                    f"heal: margin {new.acquired - old.last_true:+.3f}s"
                )
                assert old.last_true < new.acquired, (
                    f"the holder still saw the lock held {old.last_true - new.acquired:.3f}s after another "
                    f"contender acquired it{'' if old.lost else ' (and went on)'}"
                )
                assert nxt.done.wait(10) and nxt.errors == [], nxt.errors
            finally:
                if proxy is not None:
                    proxy.heal()
                close_all()  # the holder's session, lost or expired, goes with its lock
    finally:
        if proxy is not None:
            proxy.stop()
        ens.cleanup()


def test_no_contention_verdict_from_a_follower_cut_off_from_the_quorum(ens, aliases):
    """A follower cut off from the leader still answers reads from its stale copy for syncLimit ticks. A verdict
    of contention drawn there from a read alone would be a lie: a try-lock that found the lock busy before (and
    settles the next try with one read), and a waiter whose deadline comes, both read through a sync, which only
    the leader answers. The try-lock on a lock the majority has freed, and the waiter behind a holder it can no
    longer see, end in ZkUnavailable, never in False or LockTimeout."""
    leader, (f, other) = leader_and_followers(ens)
    name = f"quorum-{uuid.uuid4().hex[:8]}"
    holder = HeldInThread(zk_lock(name, using=f"s{other}"))
    assert holder.acquired
    tried = zk_lock(name, using=f"s{f}", blocking=False)
    assert tried.acquire() is False  # truly busy: the next try settles with one read
    # Its deadline falls after the cut and before the follower stops serving (SYNC_LIMIT_S after it).
    waiter = zk_lock(name, using=f"s{f}", timeout=1.0)
    waited: list[BaseException | bool] = []
    queued = threading.Thread(target=lambda: waited.append(_outcome(waiter.acquire)), daemon=True)
    started = time.monotonic()
    queued.start()
    zk = raw_client(ens.servers[other].hosts)
    try:
        path = lock_path(name, aliases[f])
        wait_until(lambda: len(zk.get_children(path)) == 2, timeout=5)  # the holder and the waiter
        ens.cut(f, leader)
        cut = time.monotonic()
        assert cut - started < 0.8, "the waiter queued too late for its deadline to fall after the cut"
        holder.release()  # committed by the majority: the follower never hears of it
        wait_until(lambda: len(zk.get_children(path)) == 1, timeout=5)  # only the waiter's node is left
    finally:
        zk.stop()
        zk.close()
    assert time.monotonic() - cut < SYNC_LIMIT_S  # the follower still serves its clients from its copy
    tried_outcome = _outcome(tried.acquire)
    queued.join(30)
    assert isinstance(tried_outcome, ZkUnavailable), f"try-lock on a lock the majority freed: {tried_outcome!r}"
    assert waited and isinstance(waited[0], ZkUnavailable), f"waiter cut off at its deadline: {waited!r}"


def _outcome(call) -> BaseException | bool:
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the test reads it
        return exc


def test_an_acquire_that_skips_its_refresh_sync_on_a_follower_just_cut_off_never_holds(ens, aliases):
    """A session used in bursts begins a burst with its lease low and no refresh sync, where a sync would prove no
    later start than the session has (lease_refresh_due). If its follower has just lost the leader, which it will
    not notice for syncLimit ticks, the create is the acquire's only proof: it cannot commit, so the acquire must
    end without holding (ZkUnavailable, as any acquire the servers cannot answer), while a contender on the
    majority holds the same lock at once."""
    leader, (f, other) = leader_and_followers(ens)
    name = f"burst-{uuid.uuid4().hex[:8]}"
    lock = zk_lock(name, using=aliases[f], timeout=2 * SESSION)
    with lock:
        session = connections[aliases[f]].session()
    # Bursts of holds, each followed by an idle spell until the lease is low: the case is a low lease for which
    # no sync is due (the bursts test in tests/locks/test_lease.py shows how often a burst begins that way).
    give_up = time.monotonic() + 12 * SESSION
    while True:
        burst_ends = time.monotonic() + 0.05 * session.timeout
        while time.monotonic() < burst_ends:
            with lock:
                pass
        wait_until(lambda: session.lease_remaining() <= 2 * session.renew_ahead(), timeout=2 * SESSION)
        if not session.lease_expired() and not session.lease_refresh_due():
            break
        assert time.monotonic() < give_up, "no burst began with a low lease and no sync due: the case was not reached"

    ens.cut(f, leader)
    cut = time.monotonic()
    outcome = _outcome(lock.acquire)
    ended = time.monotonic()
    other_lock = zk_lock(name, using=aliases[other], timeout=SESSION)
    assert other_lock.acquire(), "the majority could not hold a lock that the cut-off follower's acquire never held"
    other_lock.release()
    print(f"cut-off acquire: {outcome!r} after {ended - cut:.2f} s")
    assert outcome is not True and not lock.is_held
    assert isinstance(outcome, ZkUnavailable), f"acquire on a follower cut off from the leader: {outcome!r}"
