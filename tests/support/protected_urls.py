"""The test project's URLs with the metrics and health views behind an access check (zklocks.W070 stays quiet)."""

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.urls import include, path
from health_check.views import HealthCheckView

import zklocks.views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/", include([path("metrics", staff_member_required(zklocks.views.metrics))])),
    path("ht/", staff_member_required(HealthCheckView.as_view(checks=["zklocks.health.ZooKeeperHealthCheck"]))),
]
