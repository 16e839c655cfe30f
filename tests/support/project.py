"""A throwaway Django project laid out as users lay theirs out, outside the repository, run in subprocesses.

    project = Project(tmp_path, settings_extra="...")
    project.write("shop/tasks.py", "...")
    result = project.manage("check")

The project imports zklocks from this checkout (PYTHONPATH), never from the repository's own settings or apps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MANAGE = """\
#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""

SETTINGS = """\
SECRET_KEY = "throwaway"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "zklocks",
    "shop",
]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
ROOT_URLCONF = "proj.urls"
ZKLOCKS = {{"default": {{"HOSTS": "{hosts}", "CONNECT_TIMEOUT": 2}}}}
{extra}
"""

# The layout of Celery's "First steps with Django".
CELERY = """\
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""


class Project:
    def __init__(self, where: Path, *, hosts: str = "127.0.0.1:2181", settings_extra: str = "", celery: bool = False):
        self.dir = Path(where)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.write("manage.py", MANAGE)
        self.write("proj/settings.py", SETTINGS.format(hosts=hosts, extra=textwrap.dedent(settings_extra)))
        self.write("proj/urls.py", "urlpatterns = []\n")
        self.write(
            "proj/__init__.py", 'from .celery import app as celery_app\n\n__all__ = ("celery_app",)\n' if celery else ""
        )
        if celery:
            self.write("proj/celery.py", CELERY)
        self.write("shop/__init__.py", "")

    def write(self, path: str, text: str) -> Path:
        target = self.dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
        return target

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ZKLOCKS_", "PYTEST_", "CELERY_"))}
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(extra)
        return env

    def run(self, argv: list[str], *, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            cwd=self.dir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            start_new_session=True,
        )

    def manage(self, *argv: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "manage.py", *argv], timeout=timeout, **env)
