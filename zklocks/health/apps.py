from django.apps import AppConfig


class ZkLocksHealthConfig(AppConfig):
    """``"zklocks.health"`` in INSTALLED_APPS, next to ``"health_check"``; django-health-check 4 has no registry of
    backends, so the check is named on the health view too (docs/operations.md, "Health check")."""

    name = "zklocks.health"
    label = "zklocks_health"
    verbose_name = "ZooKeeper health check"
