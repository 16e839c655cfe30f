"""URLs that serve the metrics and health views to anyone, one of them below an include() and a decorator that
controls no access."""

from django.urls import include, path, re_path
from django.views.decorators.cache import never_cache
from health_check.views import HealthCheckView

import zklocks.views

urlpatterns = [
    path("ops/", include([re_path(r"^prometheus$", never_cache(zklocks.views.metrics))])),
    path("ht/", HealthCheckView.as_view(checks=[("zklocks.health.ZooKeeperHealthCheck", {"alias": "default"})])),
    path("db-health/", HealthCheckView.as_view(checks=["health_check.checks.Database"])),  # no lock data: left out
]
