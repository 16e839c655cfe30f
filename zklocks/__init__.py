"""zklocks: distributed locks on Apache ZooKeeper for Django and Celery."""

from django.core import checks as _checks

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


@_checks.register("zklocks")
def _check_installed(app_configs=None, **kwargs):
    """zklocks.E000. The other checks are registered by the AppConfig, which a project that forgot "zklocks" lacks:
    this one is registered on import, so it runs whenever something imported zklocks before the checks ran (a model,
    an admin module, the settings). A view imported only by the URL check is too late; its first use logs it."""
    from django.apps import apps

    if apps.is_installed("zklocks"):
        return []
    return [
        _checks.Error(
            '"zklocks" is not in INSTALLED_APPS: its system checks do not run, a database query does not stop a '
            'holder that lost its lock (on_lost="cancel"), and the admin page is missing.',
            hint='Add "zklocks" to INSTALLED_APPS.',
            id="zklocks.E000",
        )
    ]
