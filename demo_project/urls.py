from django.contrib import admin
from django.db import transaction
from django.urls import include, path
from health_check.views import HealthCheckView

import zklocks.views

urlpatterns = [
    # SQLite has one writer at a time: under ATOMIC_REQUESTS the login view's read (the user) and later writes
    # (last_login, the new session) would fail with "database is locked" whenever the load generator commits
    # in between. Without the request transaction each write waits its turn instead.
    path("admin/login/", transaction.non_atomic_requests(lambda request: admin.site.login(request))),
    path("admin/", admin.site.urls),
    # Prometheus scrapes /metrics; /ht/ is django-health-check's page (?format=json for machines).
    path("metrics", zklocks.views.metrics),
    path(
        "ht/", HealthCheckView.as_view(checks=["health_check.checks.Database", "zklocks.health.ZooKeeperHealthCheck"])
    ),
    path("", include("demo_project.shop.urls")),
]
