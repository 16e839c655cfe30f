"""The exception tree of zklocks.

    ZkLocksError
    ├── LockNotAcquired          the lock is held elsewhere (contention)
    │   └── LockTimeout          ... and the wait ran past ``timeout``
    ├── LockLost                 a lock this process held is gone (session lost, node deleted)
    ├── LockUpgradeError         a shared-only holder asked for the exclusive lock
    ├── ZkUnavailable            no ZooKeeper session could be reached (never contention)
    ├── ZkAuthError              ZooKeeper refused an operation for lack of rights (NoAuth)
    ├── SequenceExhausted        a lock node's sequence counter is used up (2**31-1 creates)
    ├── ZkConfigError            settings.ZKLOCKS is unusable (also ImproperlyConfigured)
    └── InvalidLockName          also ValueError
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


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

    def __init__(self, message: str = "", *, name: str | None = None, reason: str | None = None) -> None:
        super().__init__(message or f"lock {name!r} was lost ({reason})")
        self.name = name
        self.reason = reason


class LockUpgradeError(ZkLocksError, RuntimeError):
    """A thread holding only the shared lock asked for the exclusive one: that would deadlock."""


class ZkUnavailable(ZkLocksError):
    """No ZooKeeper session within CONNECT_TIMEOUT. Never a kind of LockNotAcquired."""


class ZkAuthError(ZkLocksError):
    """ZooKeeper refused the operation (NoAuth): wrong or missing credentials for the alias."""


class SequenceExhausted(ZkLocksError):
    """ZooKeeper's sequence counter of a lock node is used up: its suffixes no longer order the queue.

    Never a kind of LockNotAcquired: nobody holds the lock because of it. The node is recycled (deleted, and
    re-created with a fresh counter) at its next empty moment.
    """

    def __init__(self, message: str = "", *, name: str | None = None, alias: str | None = None,
                 path: str | None = None) -> None:
        super().__init__(message or f"lock {name!r} (alias {alias!r}): sequence numbers of {path} are used up")
        self.name = name
        self.alias = alias
        self.path = path


class ZkConfigError(ZkLocksError, ImproperlyConfigured):
    """settings.ZKLOCKS cannot be used (unknown alias, invalid values)."""


class InvalidLockName(ZkLocksError, ValueError):
    """The lock name (or name template) is not acceptable."""
