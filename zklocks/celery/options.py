"""The options of a SingleExecutionTask subclass, recorded when the class is made, for ``manage.py check``.

Nothing here raises: a bad option is reported by the checks (zklocks.E021, W021; the de-duplication policies:
E100 for a bad value, E101-E103, W100, W101 for policies that do not go together; see celery/conf.py) and
raised as ZkConfigError when the task is used.
"""

from __future__ import annotations

import types

from .. import conf, names
from . import conf as celery_conf


def record_option_problems(cls: type) -> None:
    """Record option problems of a task class for ``manage.py check`` (zklocks.E021); never raise here."""
    where = getattr(cls, "name", None) or f"{cls.__module__}.{cls.__qualname__}"
    own = {}  # the options this class (or a base below SingleExecutionTask) sets, by ZKLOCKS_CELERY key
    for attr, key in celery_conf.OPTION_KEYS:
        value = cls.__dict__.get(attr)
        if value is not None:
            why = celery_conf.value_problem(key, value)
            if why is None:
                pass
            elif key in celery_conf.POLICY_KEYS:
                celery_conf.declared_policy_problems.append(
                    ("zklocks.E100", str(where), f"{attr}: {why.split(' ', 1)[1]}", "Fix the option on the task.")
                )
            else:
                celery_conf.declared_task_problems.append((str(where), f"{attr}: {why.split(' ', 1)[1]}"))
        inherited = getattr(cls, attr, None)
        if inherited is not None and celery_conf.value_problem(key, inherited) is None:
            own[key] = inherited
    if any(key in celery_conf.POLICY_KEYS for key in own):
        celery_conf.declared_task_options.append((str(where), own))
    if cls.__dict__.get("_decorated"):
        _declare_unknown_options(cls, str(where))
    using = cls.__dict__.get("lock_using")
    if isinstance(using, str) and using:
        conf.declare_alias(using, f"task {where}")
    template = cls.__dict__.get("lock_key")
    if template is None:
        return
    if not isinstance(template, str) or not template:
        celery_conf.declared_task_problems.append((str(where), f"lock_key must be a non-empty str, not {template!r}"))
        return
    try:
        names.template_fields(template)
    except ValueError as exc:
        celery_conf.declared_task_problems.append((str(where), f"lock_key {template!r} {exc}"))
        return
    run = cls.__dict__.get("run")
    if run is None:
        return
    # The arguments as the run-time error lists them: a bound task's ``self`` is not one of them.
    func = run.__func__ if isinstance(run, (staticmethod, classmethod)) else types.MethodType(run, cls)
    missing = names.missing_fields(template, func)
    if missing:
        arguments = ", ".join(names.signature(func).parameters) or "none"
        celery_conf.declared_task_problems.append(
            (
                str(where),
                f"lock_key {template!r} refers to {', '.join(missing)}, which is not an argument of the task "
                f"(arguments: {arguments})",
            )
        )


def _declare_unknown_options(cls: type, where: str) -> None:
    """W021: an @app.task option that no base class defines and Celery does not read (``lock_timout=5``)."""
    bases = cls.__mro__[1:]
    known = sorted({a for b in bases for a in vars(b) if not a.startswith("_")} | celery_conf.CELERY_DECORATOR_OPTIONS)
    celery_set = {"app", "name", "run", *celery_conf.CELERY_DECORATOR_OPTIONS}
    celery_set.update(attr for attr, _ in getattr(cls, "from_config", ()))  # Task.bind() sets these from the app
    for attr, value in cls.__dict__.items():
        if attr.startswith("_") or attr in celery_set:
            continue
        if not any(hasattr(b, attr) for b in bases):
            celery_conf.declared_task_warnings.append(celery_conf.unknown_option(where, attr, value, known))
