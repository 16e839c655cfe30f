"""Load the tasks of the project's Celery apps for ``manage.py check``, as a worker would (the autodiscovered tasks
modules imported, the app finalized), so that every ``SingleExecutionTask`` is checked: docs/celery.md,
"SingleExecutionTask". Celery is never imported here: a project that has not imported it has no tasks to load.
"""

from __future__ import annotations

import os
import sys
import threading

_loading = threading.local()


def load_tasks() -> list[tuple[str, str]]:
    """Import the autodiscovered tasks modules of every Celery app created so far, and finalize the apps.

    Returns (app, problem) pairs for apps whose tasks could not be loaded; never raises.
    """
    if "celery" not in sys.modules or getattr(_loading, "active", False):
        return []
    try:
        from celery import _state, signals
    except Exception:  # noqa: BLE001 a partial or broken install: nothing to check
        return []
    failed: list[tuple[str, str]] = []
    _loading.active = True
    # Celery's Django fix-up runs every system check before it imports tasks modules; we are inside them already.
    skip_checks = os.environ.get("CELERY_SKIP_CHECKS")
    os.environ["CELERY_SKIP_CHECKS"] = "1"
    try:
        for app in list(_state._get_active_apps()):
            try:
                # What the worker's loader does first (autodiscover_tasks() waits for this signal), without
                # CELERY_IMPORTS: those modules are the worker's own business.
                for _, response in signals.import_modules.send(sender=app):
                    if isinstance(response, Exception):
                        raise response
                app.finalize()
            except Exception as exc:  # noqa: BLE001 the user's app may raise anything: reported
                failed.append((str(app.main or app), f"{type(exc).__name__}: {exc}"))
    finally:
        _loading.active = False
        if skip_checks is None:
            os.environ.pop("CELERY_SKIP_CHECKS", None)
        else:
            os.environ["CELERY_SKIP_CHECKS"] = skip_checks
    return failed
