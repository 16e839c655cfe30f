"""Django settings of the view benchmark (``python -m benchmarks.view_load``): the demo shop on PostgreSQL.

Read from the environment the driver sets: ZKLOCKS_BENCH_HOSTS, ZKLOCKS_BENCH_REDIS, ZKLOCKS_BENCH_PG_PORT,
ZKLOCKS_BENCH_OPEN (AUTH="open" instead of the default guarded alias).
"""

import os

SECRET_KEY = "zklocks-view-bench-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "zklocks", "demo_project.shop"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "benchmarks.view_urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": os.environ.get("ZKLOCKS_BENCH_PG_PORT", "5432"),
        # As in the demo: every (sync) view runs in one transaction that commits after it returns.
        "ATOMIC_REQUESTS": True,
        # psycopg's pool, so that neither server pays a new connection per request (the ASGI server runs each
        # request's database calls in a thread of its own).
        "OPTIONS": {"pool": {"min_size": 2, "max_size": 8, "timeout": 30}},
    }
}
ZKLOCKS = {
    "default": {
        "HOSTS": os.environ.get("ZKLOCKS_BENCH_HOSTS", "127.0.0.1:2181"),
        "NAMESPACE": "/zklocks-view-bench",
        "SESSION_TIMEOUT": 10.0,
        "CONNECT_TIMEOUT": 10.0,
        # Guarded by default (the floors use the same identity and ACL); --open: ZooKeeper's open ACL
        **({"AUTH": "open"} if os.environ.get("ZKLOCKS_BENCH_OPEN") else {}),
    }
}
REDIS_URL = os.environ.get("ZKLOCKS_BENCH_REDIS", "redis://127.0.0.1:6379")
# The demo's reservation view, with its simulated slow payment provider switched off.
DEMO_WORK_DELAY = 0.0
DEMO_AFTER_DELAY = 0.0
DEMO_LOCK_TIMEOUT = 30.0
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"zklocks": {"handlers": ["console"], "level": "WARNING"}},
}
