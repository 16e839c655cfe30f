"""The measured loops. Each returns plain numbers; __main__ turns them into tables, JSON and a plot.

Every comparison runs in one process against one server, in alternating rounds, so drift affects both sides.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from zklocks.testing import mntr


def configure_django(hosts: str, namespace: str = "/zklocks-bench", pool_size: int = 1, **options: object) -> None:
    """Django settings with one alias, ``default``; ``options`` are more of its settings. They are given here, not
    set afterwards: the settings are read (and cached) when Django sets up."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            SECRET_KEY="zklocks-bench",  # noqa: S106 - the aliases derive their identity from it (guarded by default)
            INSTALLED_APPS=["zklocks"],
            USE_TZ=True,
            ZKLOCKS={
                "default": {
                    "HOSTS": hosts,
                    "NAMESPACE": namespace,
                    "SESSION_TIMEOUT": 10.0,
                    "CONNECT_TIMEOUT": 10.0,
                    "POOL_SIZE": pool_size,
                    "REAP_INTERVAL": 0,
                    # Guarded by default (an identity derived from SECRET_KEY); --open: ZooKeeper's open ACL. The
                    # contender processes configure Django from the same environment.
                    **({"AUTH": "open"} if os.environ.get("ZKLOCKS_BENCH_OPEN") else {}),
                    **options,
                }
            },
        )
        import django

        django.setup()


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds`` (after a short warm-up)."""
    for _ in range(20):
        fn()
    n, started = 0, time.perf_counter()
    end = started + seconds
    while True:
        for _ in range(20):
            fn()
        n += 20
        now = time.perf_counter()
        if now >= end:
            return n / (now - started)


def kazoo_client(hosts: str, **options) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10.0, **options)
    client.start(timeout=20)
    return client


def floor_client(hosts: str, alias: str | None = None) -> KazooClient:
    """Raw kazoo on the handler every zklocks session uses (``PollingHandler``; without the sessions' short read
    path, ``read_without_select``): no figure gains on its floor from the handler alone. With ``alias``, with
    that alias's AUTH and the ACL its nodes get, so that the server checks the same rights for both."""
    from zklocks.client.iohandler import PollingHandler

    options = {}
    if alias is not None:
        from zklocks.client.kazoo_options import build_acl
        from zklocks.conf import alias_config

        cfg = alias_config(alias)
        options = {"auth_data": list(cfg.auth) or None, "default_acl": build_acl(cfg)}
    return kazoo_client(hosts, handler=PollingHandler(), **options)


def open_namespace(hosts: str, namespace: str = "/zklocks-bench") -> None:
    """Create the namespace's root with ZooKeeper's open ACL before zklocks does: kazoo's ``Lock`` and the raw
    floors run beside zklocks under it with no credential, which a root created by a guarded alias refuses."""
    client = kazoo_client(hosts)
    try:
        client.ensure_path(namespace)
    finally:
        client.stop()
        client.close()


# -- uncontended cycles and failed try-locks --


def uncontended(hosts: str, redis_port: int | None, rounds: int, seconds: float, tick: Callable[[], None]) -> dict:
    from zklocks import lock_path, zk_lock

    kz = kazoo_client(hosts)
    zl = zk_lock("bench:uncontended")
    kl = Lock(kz, lock_path("bench:uncontended-kazoo"))
    rl = None
    if redis_port is not None:
        import redis

        rl = redis.Redis(port=redis_port).lock("bench:uncontended")

    def z():
        zl.acquire()
        zl.release()

    def k():
        kl.acquire()
        kl.release()

    def r():
        rl.acquire()
        rl.release()

    # The floor: what any lock on one ephemeral node costs, a synchronous create and delete with raw kazoo.
    fz = floor_client(hosts)
    bare = lock_path("bench:uncontended-floor") + "/n"
    fz.ensure_path(bare.rsplit("/", 1)[0])

    def f():
        fz.create(bare, ephemeral=True)
        fz.delete(bare)

    out: dict[str, list[float]] = {"zklocks": [], "kazoo": [], "redis": [], "floor": []}
    for _ in range(rounds):
        out["zklocks"].append(rate(z, seconds))
        out["kazoo"].append(rate(k, seconds))
        out["floor"].append(rate(f, seconds))
        if rl is not None:
            out["redis"].append(rate(r, seconds))
        tick()
    for c in (kz, fz):
        c.stop()
        c.close()
    return out


def failed_trylock(hosts: str, redis_port: int | None, rounds: int, seconds: float, tick) -> dict:
    from zklocks import lock_path, zk_lock

    holder = kazoo_client(hosts)
    held = Lock(holder, lock_path("bench:busy"), identifier="holder")
    held.acquire()
    kz = kazoo_client(hosts)
    zl = zk_lock("bench:busy", blocking=False)
    kl = Lock(kz, lock_path("bench:busy"))
    rl = None
    if redis_port is not None:
        import redis

        client = redis.Redis(port=redis_port)
        client.lock("bench:busy").acquire()
        rl = client.lock("bench:busy")
    out: dict[str, list[float]] = {"zklocks": [], "kazoo": [], "redis": []}
    for _ in range(rounds):
        out["zklocks"].append(rate(lambda: zl.acquire(), seconds))
        out["kazoo"].append(rate(lambda: kl.acquire(blocking=False), seconds))
        if rl is not None:
            out["redis"].append(rate(lambda: rl.acquire(blocking=False), seconds))
        tick()
    held.release()
    for c in (holder, kz):
        c.stop()
        c.close()
    return out


# -- requests per cycle --


def requests_per_cycle(hosts: str, port: int, cycles: int) -> dict:
    """Server-side packets received per uncontended cycle, and round trips the caller waited on."""
    from kazoo.handlers import utils as kazoo_utils

    from zklocks import lock_path, zk_lock

    zl = zk_lock("bench:requests")
    kz = kazoo_client(hosts)
    kl = Lock(kz, lock_path("bench:requests-kazoo"))
    zl.acquire()
    zl.release()
    kl.acquire()
    kl.release()
    time.sleep(0.2)

    waits = threading.local()
    original_get = kazoo_utils.AsyncResult.get

    def counting_get(self, block=True, timeout=None):
        if block and not self.ready():
            waits.n = getattr(waits, "n", 0) + 1
        return original_get(self, block, timeout)

    def measure(fn) -> tuple[float, float]:
        waits.n = 0
        before = int(mntr(port)["zk_packets_received"])
        for _ in range(cycles):
            fn()
        time.sleep(0.2)  # let the last asynchronous delete arrive
        after = int(mntr(port)["zk_packets_received"])
        return (after - before - 1) / cycles, waits.n / cycles  # -1: the mntr connection's own packet

    kazoo_utils.AsyncResult.get = counting_get
    try:
        z = measure(lambda: (zl.acquire(), zl.release()))
        k = measure(lambda: (kl.acquire(), kl.release()))
    finally:
        kazoo_utils.AsyncResult.get = original_get
    kz.stop()
    kz.close()
    return {"zklocks": {"requests": z[0], "waits": z[1]}, "kazoo": {"requests": k[0], "waits": k[1]}}


# -- contended handoffs, N processes --


def handoff_cycle(kind: str, hosts: str, name: str) -> Callable[[], None]:
    """One acquire+release of lock ``name``: zklocks' ``zk_lock``, kazoo's ``Lock`` or the raw floor."""
    if kind == "zklocks":
        from zklocks import zk_lock

        lock = zk_lock(name)

        def cycle():
            lock.acquire()
            lock.release()

        return cycle
    if kind == "floor":
        return _floor_cycle(floor_client(hosts), name)
    from zklocks import lock_path

    klock = Lock(kazoo_client(hosts), lock_path(name))

    def kazoo_cycle():
        klock.acquire()
        klock.release()

    return kazoo_cycle


def _contender(kind: str, hosts: str, name: str, start_at, stop_at, counter, ready) -> None:
    configure_django(hosts)
    cycle = handoff_cycle(kind, hosts, name)
    cycle()
    with ready.get_lock():
        ready.value += 1
    n = 0
    while time.time() < start_at.value:
        time.sleep(0.001)
    while time.time() < stop_at.value:
        cycle()
        n += 1
    with counter.get_lock():
        counter.value += n


def _floor_cycle(client: KazooClient, name: str) -> Callable[[], None]:
    """The handoff floor with raw kazoo calls: enqueue, watch the node ahead, hold as soon as it is deleted.

    No re-read after the watch fires and a synchronous delete: the least a queue lock on ZooKeeper can do.
    It is only safe here, where every node is deleted by a holder (none by an expired session).
    """
    from zklocks import lock_path

    base = lock_path(name)
    client.ensure_path(base)

    def cycle() -> None:
        me = client.create(base + "/n-", ephemeral=True, sequence=True)
        queue = sorted(client.get_children(base))
        i = queue.index(me.rsplit("/", 1)[1])
        if i > 0:
            gone = threading.Event()
            if client.exists(f"{base}/{queue[i - 1]}", watch=lambda event: gone.set()):
                gone.wait()
        client.delete(me)

    return cycle


def handoffs(kind: str, hosts: str, processes: int, seconds: float) -> float:
    """Acquire/release handoffs per second among ``processes`` processes on one lock."""
    ctx = multiprocessing.get_context("spawn")
    start_at, stop_at = ctx.Value("d", 1e12), ctx.Value("d", 1e12)
    counter, ready = ctx.Value("q", 0), ctx.Value("q", 0)
    name = f"bench:handoff:{kind}:{processes}"
    procs = [
        ctx.Process(target=_contender, args=(kind, hosts, name, start_at, stop_at, counter, ready), daemon=True)
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    # Interpreters start and connect (slowly on a busy machine): start the clock once all have done one cycle.
    deadline = time.monotonic() + 60 + processes
    while ready.value < processes and time.monotonic() < deadline:
        time.sleep(0.05)
    now = time.time()
    start_at.value = now + 0.5
    stop_at.value = now + 0.5 + seconds
    for p in procs:
        p.join(seconds + 60)
        if p.is_alive():
            p.kill()
    return counter.value / seconds


# -- many waiters: one release wakes one waiter --


class RowFailed(Exception):
    """A benchmark row that could not be measured (its processes failed, or made no progress in time)."""


# How long the 1,000-waiter row may go without progress before it is given up, and how fast sessions are opened: a
# burst of a thousand handshakes on two cores can starve the server, the holder's session included.
STALLED_AFTER = 120.0  # seconds
SESSION_STARTS_PER_S = 100  # per waiter process


def _waiter_process(hosts: str, name: str, sessions: int, done_times) -> None:
    """``sessions`` threads, each with a session of its own, queue for lock ``name``; each reports when it holds
    (the time and its wake-ups), or what stopped it."""
    configure_django(hosts, pool_size=sessions)
    from zklocks import zk_lock

    def wait_once():
        try:
            lock = zk_lock(name, timeout=STALLED_AFTER * 3)
            lock.acquire()
            done_times.put((time.monotonic(), lock._hold().contender.wakeups))
            lock.release(wait=True)
        except Exception as exc:  # reported to the row, which gives up at once
            done_times.put(("failed", f"{type(exc).__name__}: {exc}"[:300]))

    threads = [threading.Thread(target=wait_once, daemon=True) for _ in range(sessions)]
    for t in threads:
        t.start()
        time.sleep(1 / SESSION_STARTS_PER_S)
    for t in threads:
        t.join(STALLED_AFTER * 4)


def many_waiters(hosts: str, port: int, waiters: int, per_process: int = 250) -> dict:
    """Queue ``waiters`` sessions behind one holder, release, and watch the queue drain. RowFailed, within about
    STALLED_AFTER seconds, if a waiter fails, the holder loses its lock, the server stops answering or the queue
    stops moving; the waiter processes are then killed."""
    from zklocks import zk_lock

    ctx = multiprocessing.get_context("spawn")
    holder = zk_lock(f"bench:waiters:{waiters}")
    holder.acquire()
    times = ctx.Queue()
    procs: list = []
    kz = None
    ended = False
    try:
        kz = kazoo_client(hosts)
        left = waiters
        while left > 0:
            n = min(per_process, left)
            left -= n
            procs.append(ctx.Process(target=_waiter_process, args=(hosts, holder.name, n, times), daemon=True))
        for p in procs:
            p.start()
        figures = _drain(holder, kz, port, waiters, times)
        ended = True
        return figures
    except RowFailed:
        raise
    except Exception as exc:  # a starved server: a read, a four-letter word or the release failed
        raise RowFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        for p in procs:
            if ended:
                p.join(30)
            if p.is_alive():
                p.kill()
            p.join()
        if kz is not None:
            kz.stop()
            kz.close()
        if holder._hold(strict=True) is not None:  # the row failed before the release: give the lock back
            with contextlib.suppress(Exception):
                holder.release()


def _drain(holder, kz: KazooClient, port: int, waiters: int, times) -> dict:
    import queue

    path = holder.path
    _until(lambda: len(kz.get_children(path)) - 1, waiters, times, "waiters queued")
    # Every waiter has enqueued; let each set its watch.
    _until(lambda: int(mntr(port).get("zk_watch_count", "0")), waiters, times, "watches set")
    try:
        holder.ensure_held()
    except Exception as exc:
        raise RowFailed(f"the holder lost its lock while the queue filled: {exc}") from None
    watches_before = int(mntr(port).get("zk_watch_count", "0"))
    packets_before = int(mntr(port)["zk_packets_received"])
    zxid_before = _zxid(port)
    released = time.monotonic()
    holder.release(wait=True)
    # One release: exactly one watch fires (one-shot watches disappear when they fire).
    stamps, wakes = [], []
    for _ in range(waiters):
        try:
            stamp, wakeups = times.get(timeout=STALLED_AFTER)
        except queue.Empty:
            raise RowFailed(f"no handoff for {STALLED_AFTER:.0f} s after {len(stamps)} of {waiters}") from None
        if stamp == "failed":
            raise RowFailed(f"a waiter failed after {len(stamps)} handoffs: {wakeups}")
        if stamp < released:
            raise RowFailed("a waiter held before the release: the holder had lost its lock")
        stamps.append(stamp)
        wakes.append(wakeups)
    drained = max(stamps)
    packets_after = int(mntr(port)["zk_packets_received"])
    zxid_after = _zxid(port)
    watches_after = int(mntr(port).get("zk_watch_count", "0"))
    return {
        "waiters": waiters,
        "first_handoff_ms": (min(stamps) - released) * 1000,
        "mean_handoff_ms": (drained - released) * 1000 / waiters,
        "watches_before": watches_before,
        "watches_after": watches_after,
        # Waiters woken per release: each waiter counts its own wake-ups (exactly one each means one per release).
        "notifications_per_release": sum(wakes) / waiters,
        # Each waiter watches its predecessor's data; a release fires that one watch, on that waiter only.
        "watches_per_release": (watches_before - watches_after) / waiters,
        "packets_per_handoff": (packets_after - packets_before) / waiters,
        "writes_per_handoff": (zxid_after - zxid_before) / waiters,
        "max_wakeups_per_waiter": max(wakes),
    }


def _until(count: Callable[[], int], target: int, times, what: str) -> None:
    """Wait until ``count()`` reaches ``target``; RowFailed once a waiter reports, or once the count has not grown
    for STALLED_AFTER seconds."""
    import queue

    best, moved = -1, time.monotonic()
    while True:
        now = count()
        if now >= target:
            return
        if now > best:
            best, moved = now, time.monotonic()
        elif time.monotonic() - moved > STALLED_AFTER:
            raise RowFailed(f"{what}: stuck at {now} of {target} for {STALLED_AFTER:.0f} s")
        try:
            stamp, detail = times.get_nowait()
        except queue.Empty:
            time.sleep(0.1)
            continue
        if stamp == "failed":
            raise RowFailed(f"{what}: {now} of {target}, and a waiter failed: {detail}")
        raise RowFailed(f"{what}: a waiter held before the release: the holder had lost its lock")


def _zxid(port: int) -> int:
    """The server's last zxid: every write (a transaction counts once) adds one."""
    from zklocks.testing.server import four_letter

    for line in four_letter(port, "srvr").splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16)
    raise RuntimeError("srvr reported no Zxid")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
