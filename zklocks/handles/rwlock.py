"""``zk_rw_lock``: a read/write lock whose ``.read`` and ``.write`` are ordinary lock handles.

With LAYOUT "kazoo" they are exactly ``zk_lock(name, shared=True)`` and ``zk_lock(name)``. With LAYOUT "curator"
they follow Apache Curator's InterProcessReadWriteLock (``_c_<uuid>-__READ__<seq>`` / ``_c_<uuid>-__WRIT__<seq>``),
which is a lock of its own next to Curator's mutex (``zk_lock(name)``) on the same path.
"""

from __future__ import annotations

from typing import Unpack

from ..names import validate_name
from .locks import ZkLock
from .options import LOCK_OPTIONS, LockHandleOptions, only


class ZkRwLock:
    """A read/write lock on one name: ``.read`` (many readers) and ``.write`` (one writer, no readers).

    The write holder may take the read lock too (a nested hold of the write lock); a reader asking for the
    write lock gets LockUpgradeError, as with zk_lock.
    """

    def __init__(self, name: str, **options: Unpack[LockHandleOptions]) -> None:
        only(options, LOCK_OPTIONS, "zk_rw_lock")
        self.name = validate_name(name)
        self.read = ZkLock(name, shared=True, rw=True, **options)
        self.write = ZkLock(name, rw=True, **options)
        self.using = self.read.using

    def __repr__(self) -> str:
        return f"<ZkRwLock {self.name!r} using={self.using!r}>"


def zk_rw_lock(name: str, **options: Unpack[LockHandleOptions]) -> ZkRwLock:
    """A read/write lock on ``name``: ``zk_rw_lock(name).read`` and ``zk_rw_lock(name).write`` are handles like
    zk_lock's (context manager, decorator, acquire/release, token, is_held). Under LAYOUT "curator" it works
    with Curator's ``InterProcessReadWriteLock(client, lock_path(name))``. The options are those of every lock
    handle ([LockHandleOptions][zklocks.handles.options.LockHandleOptions])."""
    return ZkRwLock(name, **options)
