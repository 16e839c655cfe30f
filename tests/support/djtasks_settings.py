"""Settings of the processes the zklocks.tasks tests start (db_worker, producers): the test project plus
django-tasks-db on an SQLite file, ZooKeeper from the environment. ZKLOCKS_TEST_TASKS_DB names the database file,
ZKLOCKS_TEST_HOSTS and ZKLOCKS_TEST_NAMESPACE the server and namespace of the test."""

import os

import django

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS
from tests.support.djtasks_conf import TASKS  # noqa: F401

INSTALLED_APPS = [*INSTALLED_APPS, *([] if django.VERSION >= (6, 0) else ["django_tasks"]), "django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["ZKLOCKS_TEST_TASKS_DB"],
        # IMMEDIATE, as the beats' shared database (tests/support/beat_app.py): workers in several processes write
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
    }
}
ZKLOCKS = {
    "default": {
        "HOSTS": os.environ["ZKLOCKS_TEST_HOSTS"],
        "NAMESPACE": os.environ["ZKLOCKS_TEST_NAMESPACE"],
        "SESSION_TIMEOUT": 2.0,
        "CONNECT_TIMEOUT": 5.0,
        "REAP_INTERVAL": 0,
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"zklocks": {"handlers": ["console"], "level": "INFO"}},
}
