"""The exception tree of zklocks:

```text
ZkLocksError
├── LockNotAcquired          the lock is held elsewhere (contention)
│   └── LockTimeout          ... and the wait ran past the timeout
├── LockLost                 a lock this process held is gone (session lost, node deleted)
├── LockUpgradeError         a shared-only holder asked for the exclusive lock
├── LockOwnershipError       a release by a non-owner while several owners hold through the handle
├── ZkUnavailable            no ZooKeeper session could be reached (never contention)
├── ZkAuthError              ZooKeeper refused an operation for lack of rights (NoAuth)
├── SequenceExhausted        a lock node's sequence counter is used up (2**31-1 creates)
├── SemaphoreMismatch        a name used as semaphore and lock, or max_leases disagree (also ValueError)
├── StaleToken               a fenced write carried a token lower than one already accepted
├── ZkConfigError            settings.ZKLOCKS is unusable (also ImproperlyConfigured)
├── SyncLockInEventLoop      a blocking acquire in a coroutine (also Django's SynchronousOnlyOperation)
└── InvalidLockName          also ValueError
```
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured, SynchronousOnlyOperation


class ZkLocksError(Exception):
    """Base class of every error raised by zklocks."""


class LockNotAcquired(ZkLocksError):
    """The lock is held by someone else and we did not get it."""

    def __init__(self, message: str = "", *, name: str | None = None) -> None:
        super().__init__(message or f"lock {name!r} is held elsewhere")
        self.name = name


class LockTimeout(LockNotAcquired):
    """The lock was not acquired within the requested timeout."""


class LockLost(ZkLocksError):
    """A lock we held is no longer ours (session expired or lost, or node removed)."""

    def __init__(
        self, message: str = "", *, name: str | None = None, reason: str | None = None, alias: str | None = None
    ) -> None:
        where = "" if alias is None else f" (alias {alias!r})"
        super().__init__(message or f"lock {name!r}{where} was lost ({reason})")
        self.name = name
        self.alias = alias
        self.reason = reason


class LockUpgradeError(ZkLocksError, RuntimeError):
    """A thread holding only the shared lock asked for the exclusive one: that would deadlock."""


class LockOwnershipError(ZkLocksError, RuntimeError):
    """A thread or task that holds nothing through a handle released it while several others hold through it:
    whose hold to release is unknown. (With one holder, a release from elsewhere releases that one's hold.)"""

    def __init__(self, message: str = "", *, name: str | None = None) -> None:
        super().__init__(message or f"lock {name!r}: released by a thread or task that does not hold it")
        self.name = name


class ZkUnavailable(ZkLocksError):
    """No ZooKeeper session within CONNECT_TIMEOUT. Never a kind of LockNotAcquired."""


class ZkAuthError(ZkLocksError):
    """ZooKeeper refused the operation (NoAuth): wrong or missing credentials for the alias."""


class SequenceExhausted(ZkLocksError):
    """ZooKeeper's sequence counter of a lock node is used up: its suffixes no longer order the queue.

    Never a kind of LockNotAcquired: nobody holds the lock because of it. The node is recycled (deleted, and
    re-created with a fresh counter) at its next empty moment.
    """

    def __init__(
        self, message: str = "", *, name: str | None = None, alias: str | None = None, path: str | None = None
    ) -> None:
        super().__init__(message or f"lock {name!r} (alias {alias!r}): sequence numbers of {path} are used up")
        self.name = name
        self.alias = alias
        self.path = path


class SemaphoreMismatch(ZkLocksError, ValueError):
    """A name is used both as a semaphore and as a plain lock, or contenders disagree on max_leases."""


class StaleToken(ZkLocksError):
    """A write carried a fencing token lower than one the resource has already accepted."""

    def __init__(self, token: int, model: str) -> None:
        super().__init__(
            f"{model}: fencing token {token} is stale; a later lock holder has written since (or ZooKeeper lost its "
            "data, and tokens started again low: docs/reliability.md, 'Tokens after data loss', resets the column)"
        )
        self.token = token


class ZkConfigError(ZkLocksError, ImproperlyConfigured):
    """settings.ZKLOCKS cannot be used (unknown alias, invalid values)."""


class InvalidLockName(ZkLocksError, ValueError):
    """The lock name (or name template) is not acceptable."""


class SyncLockInEventLoop(ZkLocksError, SynchronousOnlyOperation):
    """A blocking acquire (``with zk_lock(...)``, ``acquire()``) on the thread of a running event loop: it would
    stop every coroutine of the loop, the holder's among them. Use ``async with`` or ``acquire_async()``."""
