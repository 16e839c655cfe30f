from django.contrib import admin
from django.db import transaction
from django.urls import include, path

urlpatterns = [
    # SQLite has one writer at a time: under ATOMIC_REQUESTS the login view's read (the user) and later writes
    # (last_login, the new session) would fail with "database is locked" whenever the load generator commits
    # in between. Without the request transaction each write waits its turn instead.
    path("admin/login/", transaction.non_atomic_requests(lambda request: admin.site.login(request))),
    path("admin/", admin.site.urls),
    path("", include("demo_project.shop.urls")),
]
