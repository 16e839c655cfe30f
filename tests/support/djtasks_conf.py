"""settings.TASKS of the zklocks.tasks tests (tests.support.djtasks defines tasks on these aliases)."""

import django

FRAMEWORK = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
IMMEDIATE = f"{FRAMEWORK}.backends.immediate.ImmediateBackend"
DUMMY = f"{FRAMEWORK}.backends.dummy.DummyBackend"
DATABASE = "django_tasks_db.DatabaseBackend"


def wrapped(backend: str, using: str = "default") -> dict:
    return {"BACKEND": "zklocks.tasks.SingleExecutionBackend", "OPTIONS": {"BACKEND": backend, "USING": using}}


TASKS = {
    "default": {"BACKEND": IMMEDIATE},
    "immediate": wrapped(IMMEDIATE),
    "plain-immediate": {"BACKEND": IMMEDIATE},
    "dummy": wrapped(DUMMY),
    "db": wrapped(DATABASE),
}
