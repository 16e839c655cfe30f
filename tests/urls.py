from django.contrib import admin
from django.urls import path
from health_check.views import HealthCheckView

import zklocks.views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", zklocks.views.metrics),
    path("ht/", HealthCheckView.as_view(checks=["zklocks.health.ZooKeeperHealthCheck"])),
]
