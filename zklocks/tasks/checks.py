"""System checks of ``zklocks.tasks`` (zklocks.E110, W110, E111, W111; docs/reference.md, "System checks"), kept free
of Django's tasks framework at import so that they run in projects without it. When settings.TASKS has a
SingleExecutionBackend, the apps' ``tasks`` modules are imported first, so a task refused at definition is reported
(docs/tasks.md, "Task options").
"""

from __future__ import annotations

import importlib
import importlib.util

from django.core import checks

from .. import conf
from . import options

BACKEND_PATH = "zklocks.tasks.SingleExecutionBackend"
_BACKEND_PATHS = {BACKEND_PATH, "zklocks.tasks.backend.SingleExecutionBackend"}


def _load_task_modules() -> list[checks.CheckMessage]:
    from django.apps import apps

    messages: list[checks.CheckMessage] = []
    for app in apps.get_app_configs():
        module = f"{app.name}.tasks"
        recorded = len(options.declared_task_problems)
        try:
            if importlib.util.find_spec(module) is None:
                continue
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 any import error of a tasks module is reported, never raised
            if len(options.declared_task_problems) > recorded:
                continue  # a task refused at definition: reported as E111 below
            messages.append(
                checks.Warning(
                    f"{module}: could not be imported to check its tasks ({type(exc).__name__}: {exc}).",
                    hint="A worker would fail the same way: fix the import error.",
                    id="zklocks.W111",
                )
            )
    return messages


def check_tasks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    from django.conf import settings

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return []
    ours = {
        alias: params.get("OPTIONS", {})
        for alias, params in backends.items()
        if isinstance(params, dict) and params.get("BACKEND") in _BACKEND_PATHS
    }
    if not ours:
        return []
    aliases = frozenset(conf.get_config()[0])
    declared = conf.alias_names()
    messages: list[checks.CheckMessage] = []
    for alias, raw in ours.items():
        for p in options.backend_problems(alias, raw, aliases, declared):
            cls = checks.Warning if p.id.startswith("zklocks.W") else checks.Error
            messages.append(cls(p.msg, hint=p.hint, id=p.id))
    messages.extend(_load_task_modules())
    for where, msg in dict.fromkeys(options.declared_task_problems):
        messages.append(
            checks.Error(
                f"task {where}: {msg}",
                hint="Fix the option in the task's @task(...) decorator (see docs/tasks.md).",
                id="zklocks.E111",
            )
        )
    return messages
