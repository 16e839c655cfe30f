"""Demo settings, read from the environment so the same demo runs against an existing ensemble."""

import json
import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("ZKLOCKS_DEMO_DIR", BASE_DIR / ".demo"))

# While `make demo` runs, it writes the hosts of its own ZooKeeper and Redis here, so that `python manage.py
# zklocks_status` (or a Celery command) in another terminal reaches them. The environment takes precedence.
try:
    _SERVICES = json.loads((DATA_DIR / "services.json").read_text())
except (OSError, ValueError):
    _SERVICES = {}


def _service(name: str, default: str) -> str:
    return os.environ.get(name) or _SERVICES.get(name) or default


# DJANGO_SECRET_KEY, or the key `make demo` drew on its first run and keeps in its data directory (the lock nodes
# grant the ZooKeeper identity derived from it: a `manage.py zklocks_release` in another terminal needs it too), or
# else a fresh random one, so that no published key signs the demo's sessions. DEBUG only when asked: DJANGO_DEBUG=1.
try:
    _KEPT_KEY = (DATA_DIR / "secret_key").read_text().strip()
except OSError:
    _KEPT_KEY = ""
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _KEPT_KEY or secrets.token_urlsafe(50)
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "zklocks",
    "health_check",
    "zklocks.health",
    "demo_project.shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "demo_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("ZKLOCKS_DEMO_DB", str(DATA_DIR / "demo.sqlite3")),
        "ATOMIC_REQUESTS": True,
        # WAL: readers never block the writer. SQLite still allows one writer at a time.
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
ZKLOCKS = {
    "default": {
        "HOSTS": _service("ZKLOCKS_HOSTS", "127.0.0.1:2181"),
        "NAMESPACE": os.environ.get("ZKLOCKS_NAMESPACE", "/zklocks-demo"),
        "SESSION_TIMEOUT": float(os.environ.get("ZKLOCKS_SESSION_TIMEOUT", "10")),
        "CONNECT_TIMEOUT": float(os.environ.get("ZKLOCKS_CONNECT_TIMEOUT", "5")),
    }
}
CELERY_BROKER_URL = _service("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", CELERY_BROKER_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Two beats run (demo_project/run.py); the elected one sends, the admin shows the leader and the standby.
CELERY_BEAT_SCHEDULE = {"report-every-30s": {"task": "demo.daily_report", "schedule": 30.0}}
ZKLOCKS_BEAT = {"ELECTION": "demo-beat"}

# How long the demo's critical sections take, so that the admin shows holders and queues.
DEMO_WORK_DELAY = float(os.environ.get("DEMO_WORK_DELAY", "0.3"))
DEMO_READ_DELAY = float(os.environ.get("DEMO_READ_DELAY", "0.05"))
DEMO_AFTER_DELAY = float(os.environ.get("DEMO_AFTER_DELAY", "0"))  # work after the critical section
DEMO_TASK_DELAY = float(os.environ.get("DEMO_TASK_DELAY", "2.0"))
DEMO_LOCK_TIMEOUT = float(os.environ.get("DEMO_LOCK_TIMEOUT", "10"))
# The search reindex holds its lock this long: time to find it in the admin and force-release it.
DEMO_LONG_HOLD = float(os.environ.get("DEMO_LONG_HOLD", "120"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"zklocks": {"handlers": ["console"], "level": "WARNING"}},
}
USE_TZ = True
TIME_ZONE = os.environ.get("DEMO_TIME_ZONE", "UTC")  # the admin shows "held since" in this zone
STATIC_URL = "/static/"  # served by `runserver --insecure` (demo_project/run.py), DEBUG or not
# The demo serves /metrics and /ht/ to anyone who reaches 127.0.0.1, the only address its server listens on; a
# deployment protects them (docs/security.md, "Metrics and health pages").
SILENCED_SYSTEM_CHECKS = ["zklocks.W070"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
