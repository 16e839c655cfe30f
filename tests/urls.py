from django.contrib import admin
from django.urls import path

import zklocks.views

urlpatterns = [path("admin/", admin.site.urls), path("metrics", zklocks.views.metrics)]
