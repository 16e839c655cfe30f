from django.apps import AppConfig


class ZkLocksHealthConfig(AppConfig):
    """``"zklocks.health"`` in INSTALLED_APPS, next to ``"health_check"``.

    django-health-check 4 has no registry of backends any more: its view lists the checks it runs, so the check
    is named there too (see zklocks.health).
    """

    name = "zklocks.health"
    label = "zklocks_health"
    verbose_name = "ZooKeeper health check"
