"""zklocks: distributed locks on Apache ZooKeeper for Django and Celery."""

from .client.pools import close_all
from .exceptions import (
    InvalidLockName,
    LockLost,
    LockNotAcquired,
    LockOwnershipError,
    LockTimeout,
    LockUpgradeError,
    SemaphoreMismatch,
    SequenceExhausted,
    StaleToken,
    SyncLockInEventLoop,
    ZkAuthError,
    ZkConfigError,
    ZkLocksError,
    ZkUnavailable,
)
from .handles.election import zk_leader
from .handles.locks import lock_path, zk_lock
from .handles.multilock import zk_multi_lock
from .handles.rwlock import zk_rw_lock
from .handles.semaphores import zk_semaphore
from .handles.stopping import checkpoint

__all__ = [
    "zk_lock",
    "zk_semaphore",
    "zk_multi_lock",
    "zk_rw_lock",
    "zk_leader",
    "lock_path",
    "checkpoint",
    "close_all",
    "ZkLocksError",
    "LockNotAcquired",
    "LockTimeout",
    "LockLost",
    "LockOwnershipError",
    "LockUpgradeError",
    "ZkUnavailable",
    "ZkAuthError",
    "ZkConfigError",
    "SequenceExhausted",
    "SemaphoreMismatch",
    "StaleToken",
    "InvalidLockName",
    "SyncLockInEventLoop",
]
__version__ = "0.1.0"
