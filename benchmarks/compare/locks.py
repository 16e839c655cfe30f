"""One lock per system, as its documentation says to hold it, behind one small interface (in a worker process).

``acquire(timeout) -> bool``, ``release()``, ``check() -> bool`` (``None`` where the system offers no check),
``token() -> int | None`` (a fencing token where the system offers one), ``renew()`` (called between the steps of a
long job, where the holder itself must extend its lease).
"""

from __future__ import annotations

import threading
import time
import uuid

NAME = "compare-lock"

# system -> (has a check, has a fencing token)
FEATURES = {
    "zklocks": (True, True),
    "kazoo": (True, False),
    "redis-lock": (False, False),
    "redlock": (True, False),
    "pglock": (False, False),
    "pglock-pgbouncer": (False, False),
    "etcd": (True, True),
}


class Base:
    def check(self) -> bool | None:
        return None

    def token(self) -> int | None:
        return None

    def renew(self) -> None:
        pass

    def close(self) -> None:
        pass


class ZkLocks(Base):
    """``zk_lock``; the check is ``ensure_held()`` (a sync and a read), the token ``lock.token`` (czxid)."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        from django.conf import settings

        settings.configure(
            SECRET_KEY="zklocks-bench",  # noqa: S106 - the aliases derive their identity from it (guarded by default)
            INSTALLED_APPS=["zklocks"],
            USE_TZ=True,
            ZKLOCKS={
                "default": {
                    "HOSTS": addrs["zk"],
                    "NAMESPACE": "/compare",
                    "SESSION_TIMEOUT": ttl,
                    "CONNECT_TIMEOUT": 10.0,
                    "POOL_SIZE": 1,
                    "REAP_INTERVAL": 0,
                }
            },
        )
        import django

        django.setup()
        from zklocks import zk_lock

        self.zk_lock = zk_lock
        self.lock = None

    def acquire(self, timeout: float) -> bool:
        self.lock = self.zk_lock(NAME, timeout=timeout)
        return self.lock.acquire()

    def release(self) -> None:
        self.lock.release()

    def check(self) -> bool:
        self.lock.ensure_held()  # raises LockLost or ZkUnavailable
        return True

    def token(self) -> int | None:
        return self.lock.token

    def close(self) -> None:
        from zklocks import close_all

        close_all()


class Kazoo(Base):
    """kazoo's ``Lock``; as kazoo's docs say, a connection listener: SUSPENDED or LOST means stop working."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        from kazoo.client import KazooClient, KazooState

        self.client = KazooClient(hosts=addrs["zk"], timeout=ttl)
        self.connected = threading.Event()

        def listener(state):
            if state == KazooState.CONNECTED:
                self.connected.set()
            else:
                self.connected.clear()
                self.lost = True

        self.lost = False
        self.client.add_listener(listener)
        self.client.start(timeout=30)
        self.lock = self.client.Lock("/compare/" + NAME, uuid.uuid4().hex)

    def acquire(self, timeout: float) -> bool:
        from kazoo.exceptions import LockTimeout

        self.connected.wait(timeout)
        self.lost = False
        try:
            return self.lock.acquire(timeout=timeout)
        except LockTimeout:
            return False

    def release(self) -> None:
        self.lock.release()

    def check(self) -> bool:
        return self.lock.is_acquired and not self.lost

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def _redis(port: int, ttl: float):
    import redis

    return redis.Redis(port=port, socket_timeout=max(0.2, ttl / 4), socket_connect_timeout=max(0.2, ttl / 4))


class RedisLock(Base):
    """python-redis-lock with ``auto_renewal=True``. It offers no check of ownership (``locked()`` tells whether
    anyone holds the key) and no token: the holder only renews, in the library's thread."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        import redis_lock

        self.redis_lock = redis_lock
        import redis

        # A socket timeout above BLPOP's wait (the acquire's timeout), or redis-py's retries stretch each wait.
        self.conn = redis.Redis(port=addrs["redis"][0], socket_timeout=ttl + 1, socket_connect_timeout=1)
        self.ttl = ttl
        self.lock = None

    def acquire(self, timeout: float) -> bool:
        self.lock = self.redis_lock.Lock(self.conn, NAME, expire=max(1, int(self.ttl)), auto_renewal=True)
        return self.lock.acquire(timeout=min(timeout, max(1, int(self.ttl))))

    def release(self) -> None:
        self.lock.release()


class Redlock(Base):
    """pottery's ``Redlock`` over three Redis servers. The holder extends it between steps (``extend()``) and
    checks ``locked()`` (time left on a quorum) before each step, as pottery's docs say; no token."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        from pottery import Redlock as PotteryRedlock

        masters = {_redis(port, ttl) for port in addrs["redis"]}
        self.lock = PotteryRedlock(key=NAME, masters=masters, auto_release_time=ttl, num_extensions=10**9)

    def acquire(self, timeout: float) -> bool:
        return self.lock.acquire(timeout=timeout)

    def release(self) -> None:
        self.lock.release()

    def check(self) -> bool:
        return self.lock.locked() > 0

    def renew(self) -> None:
        self.lock.extend()


class PgLock(Base):
    """django-pglock's session-level ``advisory`` lock; PostgreSQL offers neither check nor token for it."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        from django.conf import settings

        settings.configure(
            INSTALLED_APPS=["pgactivity", "pglock"],
            USE_TZ=True,
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": "postgres",
                    "USER": "bench",
                    "HOST": "127.0.0.1",
                    "PORT": str(addrs["pg"]),
                    "DISABLE_SERVER_SIDE_CURSORS": True,
                    "OPTIONS": {"connect_timeout": 5},
                }
            },
        )
        import django

        django.setup()
        import pglock

        self.pglock = pglock
        self.lock = None

    def acquire(self, timeout: float) -> bool:
        from django.db import connection

        self.lock = self.pglock.advisory(NAME, timeout=timeout)
        try:
            return self.lock.acquire()
        except Exception:
            connection.close()  # a broken connection: open a new one next time, as Django does per request
            raise

    def release(self) -> None:
        from django.db import connection

        try:
            self.lock.release()
        except Exception:
            connection.close()
            raise

    def close(self) -> None:
        from django.db import connection

        connection.close()


class EtcdLock(Base):
    """A lease lock on etcd's v3 API through its JSON gateway, with the maintained ``etcd3gw`` client: grant a lease,
    put the key in a transaction only if it does not exist (the holder's token is the key's revision), keep the
    lease alive from a thread, and hold only while the lease's TTL, counted from the last keep-alive sent, lasts.
    etcd3gw's own ``Lock`` does not wait and exposes no revision: this is the same transaction, with both."""

    def __init__(self, addrs: dict, ttl: float) -> None:
        from etcd3gw.client import Etcd3Client

        self.client = Etcd3Client(host="127.0.0.1", port=addrs["etcd"], timeout=max(0.5, ttl / 2))
        self.ttl = int(max(1, round(ttl)))
        self.key = "/compare/" + NAME
        self.lease = None
        self.deadline = 0.0
        self.revision: int | None = None
        self.stop = threading.Event()

    def acquire(self, timeout: float) -> bool:
        from etcd3gw.utils import _encode

        end = time.monotonic() + timeout
        lease = self.client.lease(self.ttl)
        granted = time.monotonic()
        value = uuid.uuid4().hex
        txn = {
            "compare": [{"key": _encode(self.key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            "success": [{"request_put": {"key": _encode(self.key), "value": _encode(value), "lease": lease.id}}],
        }
        while True:
            result = self.client.transaction(txn)
            if result.get("succeeded"):
                break
            if time.monotonic() > end:
                lease.revoke()
                return False
            time.sleep(0.005)  # etcd3gw has no blocking acquire; a poll every 5 ms
        self.lease, self.value, self.deadline = lease, value, granted + self.ttl
        self.revision = int(result["header"]["revision"])
        self.stop = threading.Event()
        threading.Thread(target=self._keepalive, args=(lease, self.stop), daemon=True).start()
        return True

    def _keepalive(self, lease, stop: threading.Event) -> None:
        while not stop.wait(self.ttl / 3):
            sent = time.monotonic()
            try:
                if lease.refresh() > 0:
                    self.deadline = sent + self.ttl
            except Exception:
                pass

    def check(self) -> bool:
        return time.monotonic() < self.deadline - 0.1

    def token(self) -> int | None:
        return self.revision

    def release(self) -> None:
        self.stop.set()
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.revoke()  # deletes the key if it is still ours (it is attached to this lease)


def open_lock(system: str, addrs: dict, ttl: float) -> Base:
    kinds = {
        "zklocks": ZkLocks,
        "kazoo": Kazoo,
        "redis-lock": RedisLock,
        "redlock": Redlock,
        "pglock": PgLock,
        "pglock-pgbouncer": PgLock,
        "etcd": EtcdLock,
    }
    return kinds[system](addrs, ttl)
