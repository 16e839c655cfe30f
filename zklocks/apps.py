from django.apps import AppConfig
from django.core import checks


class ZkLocksConfig(AppConfig):
    name = "zklocks"
    verbose_name = "ZooKeeper locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created

        from . import checks as zk_checks
        from .ops import security_checks
        from .receivers import on_connection_created, on_setting_changed
        from .tasks import checks as tasks_checks

        checks.register(zk_checks.check_settings, "zklocks")
        checks.register(zk_checks.check_celery_settings, "zklocks")
        checks.register(zk_checks.check_beat_settings, "zklocks")
        checks.register(zk_checks.check_other_settings, "zklocks")
        checks.register(zk_checks.check_kazoo, "zklocks")
        checks.register(tasks_checks.check_tasks, "zklocks")
        # Talks to ZooKeeper: only with `manage.py check --deploy`, never on every manage.py command.
        checks.register(zk_checks.check_namespace_acls, "zklocks", deploy=True)
        checks.register(zk_checks.check_guarded_aliases, "zklocks", deploy=True)
        checks.register(zk_checks.check_server_conf, "zklocks", deploy=True)
        checks.register(security_checks.check_exposed_views, "zklocks", deploy=True)
        setting_changed.connect(on_setting_changed, dispatch_uid="zklocks.setting_changed")
        connection_created.connect(on_connection_created, dispatch_uid="zklocks.connection_created")
        # The reaper (operations) sits above the client layer: the pools call it back with each first session,
        # so that they never import it.
        from .ops import reaper

        reaper.install()
        # Optional: Prometheus metrics (prometheus_client) and OpenTelemetry spans (opentelemetry-api). Neither
        # raises on a bad setting: check_other_settings reports it (a bad METRICS_FAMILY: no family label).
        from .contrib import metrics, tracing

        metrics.install()
        tracing.install()
        self._fence_beat_ticks()

    @staticmethod
    def _fence_beat_ticks() -> None:
        """ZKLOCKS_BEAT["FENCE_WORKERS"]: workers drop a deposed beat leader's late ticks (celery/beat_fence.py)."""
        from .celery import conf as celery_conf

        if celery_conf.beat_settings()["FENCE_WORKERS"] is True:
            try:
                from .celery import beat_fence
            except ImportError:  # no Celery: nothing to fence
                return
            beat_fence.install()
