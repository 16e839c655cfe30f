import os
import tempfile

SECRET_KEY = "zklocks-tests"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the live server of the browser tests serves the admin's CSS
    "zklocks",
    "health_check",
    "zklocks.health",
    "tests.support.app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(tempfile.gettempdir(), f"zklocks-tests-{os.getpid()}.sqlite3"),
        # A file, not shared-cache memory: concurrent requests must see SQLite's real isolation.
        "TEST": {"NAME": os.path.join(tempfile.gettempdir(), f"zklocks-tests-{os.getpid()}-test.sqlite3")},
    }
}
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
# Replaced per test by the zklocks_settings fixture; a real server is started by the suite.
ZKLOCKS = {
    "default": {
        "HOSTS": os.environ.get("ZKLOCKS_HOSTS", "127.0.0.1:2181"),
        "NAMESPACE": os.environ.get("ZKLOCKS_NAMESPACE", "/zklocks-test"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
STATIC_URL = "/static/"
# The test project serves /metrics and /ht/ to anyone on purpose (the tests call them anonymously): it is no
# deployment. tests/admin_cli/test_security_checks.py turns the warning back on.
SILENCED_SYSTEM_CHECKS = ["zklocks.W070"]
