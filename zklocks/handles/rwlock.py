"""``zk_rw_lock``: a read/write lock whose ``.read`` and ``.write`` are ordinary lock handles.

With LAYOUT "kazoo" they are exactly ``zk_lock(name, shared=True)`` and ``zk_lock(name)``. With LAYOUT "curator"
they follow Apache Curator's InterProcessReadWriteLock (``_c_<uuid>-__READ__<seq>`` / ``_c_<uuid>-__WRIT__<seq>``),
which is a lock of its own next to Curator's mutex (``zk_lock(name)``) on the same path.
"""

from __future__ import annotations

from ..names import validate_name
from .locks import ZkLock


class ZkRwLock:
    """A read/write lock on one name: ``.read`` (many readers) and ``.write`` (one writer, no readers).

    The write holder may take the read lock too (a nested hold of the write lock); a reader asking for the
    write lock gets LockUpgradeError, as with zk_lock.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        using: str = "default",
        release_on_commit: bool | str = False,
        on_lost: str = "notify",
        max_hold: float | None = None,
        lock_delay: float | None = None,
    ) -> None:
        self.name = validate_name(name)
        self.using = using
        common: dict = dict(
            timeout=timeout,
            blocking=blocking,
            using=using,
            release_on_commit=release_on_commit,
            on_lost=on_lost,
            max_hold=max_hold,
            lock_delay=lock_delay,
        )
        self.read = ZkLock(name, shared=True, rw=True, **common)
        self.write = ZkLock(name, rw=True, **common)

    def __repr__(self) -> str:
        return f"<ZkRwLock {self.name!r} using={self.using!r}>"


def zk_rw_lock(
    name: str,
    *,
    timeout: float | None = None,
    blocking: bool = True,
    using: str = "default",
    release_on_commit: bool | str = False,
    on_lost: str = "notify",
    max_hold: float | None = None,
    lock_delay: float | None = None,
) -> ZkRwLock:
    """A read/write lock on ``name``: ``zk_rw_lock(name).read`` and ``zk_rw_lock(name).write`` are handles like
    zk_lock's (context manager, decorator, acquire/release, token, is_held). Under LAYOUT "curator" it works
    with Curator's ``InterProcessReadWriteLock(client, lock_path(name))``."""
    return ZkRwLock(
        name,
        timeout=timeout,
        blocking=blocking,
        using=using,
        release_on_commit=release_on_commit,
        on_lost=on_lost,
        max_hold=max_hold,
        lock_delay=lock_delay,
    )
