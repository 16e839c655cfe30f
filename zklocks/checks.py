"""Django system checks for settings.ZKLOCKS and for lock decorators that name an unknown alias.

Every id, what it reports and when it runs (``check --deploy`` for those that talk to ZooKeeper) is listed in
docs/reference.md, "System checks"; the ids are stable. The Celery checks live in celery/conf.py, those of Django's
tasks framework in tasks/checks.py, the kazoo self-check in client/kazoo_adapter/compat.py, the deploy checks'
audits in ops/security_checks.py and ops/acl_audit.py: this module registers them all.
"""

from __future__ import annotations

import sys
import time

from django.conf import settings
from django.core import checks

from . import conf, middleware
from .celery import conf as celery_conf
from .celery import discover
from .client.kazoo_adapter import compat as kazoo_compat
from .exceptions import ZkAuthError, ZkConfigError, ZkUnavailable
from .identity import project_keys
from .ops import security_checks


def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    discover.load_tasks()  # tasks declare their aliases (E012) when their classes are created
    _load_urlconf()  # so do views decorated with zk_lock(using=...), when their module is imported
    configs, problems = conf.validate(_raw_setting(), project_keys(settings))
    messages: list[checks.CheckMessage] = []
    for p in problems:
        cls = checks.Warning if p.id.startswith("zklocks.W") else checks.Error
        messages.append(cls(p.msg, hint=p.hint, id=p.id))
    messages.extend(security_checks.nested_namespaces(configs))
    raw = _raw_setting()
    known = set(raw) if isinstance(raw, dict) else set()
    for alias, where in conf.declared_aliases():
        if alias not in known and alias != conf.DEFAULT_ALIAS:  # a missing 'default' is E001 already
            messages.append(
                checks.Error(
                    f"{where} uses the zklocks alias {alias!r}, which settings.ZKLOCKS does not define.",
                    hint=f"Define ZKLOCKS[{alias!r}] or pass one of: {', '.join(sorted(known)) or 'none'}.",
                    id="zklocks.E012",
                )
            )
        elif alias in configs and configs[alias].read_only:
            messages.append(
                checks.Warning(
                    f"{where} takes locks on the zklocks alias {alias!r}, which is READ_ONLY: it would raise "
                    "ZkConfigError.",
                    hint="A READ_ONLY alias serves the admin, the health check and zklocks_status only; give this "
                    "code an alias with the project's identity, or leave READ_ONLY out in this deployment.",
                    id="zklocks.W008",
                )
            )
    return messages


def _load_urlconf() -> None:
    """Import the project's URLconf, and with it the views it routes to. A URLconf that does not import is
    Django's own check to report (urls.E...), not ours."""
    from django.conf import settings
    from django.urls import get_resolver

    if not getattr(settings, "ROOT_URLCONF", None):
        return
    try:
        get_resolver().url_patterns  # noqa: B018 - the import is what we want
    except Exception:  # noqa: BLE001, S110 - see the docstring
        pass


def _raw_setting():
    from django.conf import settings

    return getattr(settings, "ZKLOCKS", None)


def check_namespace_acls(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Deploy check: compare each alias's namespace ACLs with the configured ones. Per alias it waits at most
    CONNECT_TIMEOUT for a session and CONNECT_TIMEOUT again for the reads."""
    from .ops import acl_audit

    if check_kazoo():
        return []  # no session can start: E060 says why
    configs, _ = conf.get_config()
    messages: list[checks.CheckMessage] = []
    for alias, cfg in sorted(configs.items()):
        if cfg.read_only:
            continue  # creates nothing, and its identity is not the one the nodes are meant for
        where = f"ZKLOCKS[{alias!r}]"
        try:
            session = acl_audit.connect(cfg)
        except (ZkUnavailable, ZkAuthError) as exc:
            messages.append(_unchecked(where, cfg, exc))
            continue
        try:
            result = acl_audit.audit(
                session, limit=acl_audit.DEPLOY_LIMIT, deadline=time.monotonic() + cfg.connect_timeout
            )
        except (ZkUnavailable, ZkAuthError) as exc:
            messages.append(_unchecked(where, cfg, exc))
            continue
        finally:
            session.close(wait=False)
        messages.extend(acl_messages(where, result))
    return messages


def check_guarded_aliases(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Deploy check W007: an alias whose nodes others may write or delete (no AUTH, or an ACL granting world, an
    ``ip:`` range or a foreign digest): anyone with that access can hand a held lock over or delete a holder's
    node (docs/security.md). Offline: reads settings only."""
    from .client.kazoo_options import build_acl, outside_writers

    configs, _ = conf.get_config()
    messages: list[checks.CheckMessage] = []
    for alias, cfg in sorted(configs.items()):
        others = outside_writers(build_acl(cfg), cfg)
        if not others or cfg.read_only:  # a READ_ONLY alias creates no node
            continue
        why = (
            'AUTH is "open", so its nodes take ZooKeeper\'s open ACL'
            if cfg.identity == "open"
            else (f"its ACL lets {', '.join(others)} write or delete")
        )
        messages.append(
            checks.Warning(
                f"ZKLOCKS[{alias!r}] is not guarded: {why}. Any client with that access can hand a held lock "
                "over to a waiter or delete a holder's node.",
                hint="Leave AUTH out (an identity derived from SECRET_KEY) or set it to a digest credential of the "
                "alias's own, with an ACL of its identities only; "
                "docs/security.md says who can hand a lock over under each configuration.",
                id="zklocks.W007",
            )
        )
    return messages


def check_server_conf(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Deploy check: each alias's servers, where they answer the ``conf`` four-letter word, against the lease's
    relay gap (E017) and for differing session timeouts (W004). Servers that do not answer are skipped
    (``manage.py zklocks_check`` says so); at most 2 s per server."""
    from .client import serverconf

    configs, _ = conf.get_config()
    messages: list[checks.CheckMessage] = []
    for alias, cfg in sorted(configs.items()):
        where = f"ZKLOCKS[{alias!r}]"
        servers, _unread = serverconf.read_all(cfg.hosts, min(cfg.connect_timeout, 2.0))
        problems, notes = serverconf.lease_problems(servers, cfg.session_timeout, cfg.tick_time)
        for text in problems:
            messages.append(
                checks.Error(
                    f"{where}: {text}.",
                    hint="A lease proof must wait one tickTime of the leader; otherwise is_held may stay True after "
                    "the leader expired the session (docs/reliability.md, 'The tick').",
                    id="zklocks.E017",
                )
            )
        for text in notes:
            messages.append(
                checks.Warning(
                    f"{where}: {text}.",
                    hint="Safe, but a session's lease is only as long as the shortest timeout it has met "
                    "(docs/reliability.md, 'Mixed session timeouts').",
                    id="zklocks.W004",
                )
            )
    return messages


def check_kazoo(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check E060: the installed kazoo still has every internal zklocks relies on (kazoo_compat.verify);
    W062: the interpreter lacks a CPython internal of the signal-safe waits (client/interrupts.py); W063: the
    self-check cannot read this Python's bytecode and checks less (kazoo_compat.bytecode_readable)."""
    from .client import interrupts

    messages: list[checks.CheckMessage] = []
    try:
        kazoo_compat.verify()
    except ZkConfigError as exc:
        messages.append(
            checks.Error(
                f"{exc}.",
                hint=f'Install a tested kazoo: pip install "{kazoo_compat.SUPPORTED}". Until then every lock '
                "raises ZkConfigError instead of starting a session.",
                id="zklocks.E060",
            )
        )
    if not kazoo_compat.bytecode_readable():
        messages.append(
            checks.Warning(
                "zklocks does not read this Python's bytecode right, so its start-up check of kazoo's internals "
                "(zklocks.E060) judges by name whether kazoo still sets an attribute on self or calls a hook through "
                "self: a hook kazoo now calls through its class would go unnoticed, and stay uncalled.",
                hint=f'Run a tested Python (3.11 to 3.13) with a tested kazoo ("{kazoo_compat.SUPPORTED}").',
                id="zklocks.W063",
            )
        )
    missing = interrupts.cpython_internals_missing()
    if missing:
        messages.append(
            checks.Warning(
                f"This Python lacks {', '.join(missing)}: zklocks waits on the standard library's Condition and "
                "Event, where an exception raised by a signal handler (Celery's soft time limit, a SIGALRM "
                "handler) can leave one of their locks taken.",
                hint="Run a CPython that has them (3.12, 3.13, or a recent 3.11 release; a later Python once zklocks "
                "is tested on it), or silence this where no signal handler raises.",
                id="zklocks.W062",
            )
        )
    return messages


def acl_messages(where: str, result) -> list[checks.CheckMessage]:
    out: list[checks.CheckMessage] = []
    locked_out = result.no_access
    if locked_out:
        first = locked_out[0]
        more = f" (and {len(locked_out) - 1} more node(s))" if len(locked_out) > 1 else ""
        out.append(
            checks.Error(
                f"{where}: in {first.path}, {first.detail}{more}; every lock of this alias will fail with NoAuth.",
                hint="ZooKeeper accepts any digest password at connect time and refuses later: check the password in "
                "AUTH, or grant this identity CREATE, DELETE and READ on the namespace.",
                id="zklocks.E015",
            )
        )
    weaker = result.weaker
    if weaker:
        first = weaker[0]
        more = f" (and {len(weaker) - 1} more node(s) below it)" if len(weaker) > 1 else ""
        out.append(
            checks.Warning(
                f"{where}: {first.path} has a weaker ACL than configured: {first.detail}{more}.",
                hint="Nodes keep the ACL they were created with, e.g. before AUTH was set. Run "
                "`manage.py zklocks_check --fix-acls` to give them the configured ACL.",
                id="zklocks.W002",
            )
        )
    unread = result.of_kind("no-reader")
    if unread:
        more = f" (and {len(unread) - 1} more node(s))" if len(unread) > 1 else ""
        out.append(
            checks.Warning(
                f"{where}: {unread[0].path}: the project's read-only identity may not read it{more}: a READ_ONLY "
                "alias (the admin, the health check or zklocks_status on another host) cannot see those locks.",
                hint="Nodes keep the ACL they were created with. Run `manage.py zklocks_check --fix-acls` to grant "
                "the read-only identity READ on them.",
                id="zklocks.W009",
            )
        )
    for finding in result.of_kind("ancestor"):
        out.append(
            checks.Warning(
                f"{where}: {finding.path} (above the namespace {result.namespace}): {finding.detail}.",
                hint="Give that node an ACL that grants CREATE, DELETE and ADMIN only to this identity (setAcl), or "
                "choose a NAMESPACE below a node you own, e.g. one zklocks creates: ancestors it creates get the "
                "configured ACL.",
                id="zklocks.W005",
            )
        )
    hidden = result.of_kind("hidden")
    if hidden:
        more = f" (and {len(hidden) - 1} more node(s))" if len(hidden) > 1 else ""
        out.append(
            checks.Warning(
                f"{where}: {hidden[0].path}: {hidden[0].detail}{more}.",
                hint="Someone with ADMIN changed the node's ACL or made the node. Look at it with a super user or "
                "the identity that made it, and give it the configured ACL.",
                id="zklocks.W006",
            )
        )
    if result.truncated:
        out.append(
            checks.Error(
                f"{where}: the ACL audit stopped after {result.checked - 1} node(s) below {result.namespace}; "
                f"{result.not_checked} or more were not checked.",
                hint="Run `manage.py zklocks_check`, which audits every node (there is no limit unless --limit is "
                "given).",
                id="zklocks.E018",
            )
        )
    return out


def _unchecked(where: str, cfg, exc: Exception) -> checks.CheckMessage:
    return checks.Warning(
        f"{where}: could not check the ACLs of {cfg.namespace}: {exc}",
        hint="Run `manage.py zklocks_check` once ZooKeeper is reachable with these settings.",
        id="zklocks.W003",
    )


def check_celery_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check: ZKLOCKS_CELERY, and the options of the SingleExecutionTask subclasses of the project's Celery
    apps (their autodiscovered tasks modules are imported first)."""
    from django.conf import settings

    unloaded = discover.load_tasks()

    _, problems = celery_conf.validate(getattr(settings, "ZKLOCKS_CELERY", None))
    messages: list[checks.CheckMessage] = []
    for p in problems:
        cls = checks.Warning if p.id.startswith("zklocks.W") else checks.Error
        messages.append(cls(p.msg, hint=p.hint, id=p.id))
    for where, msg in dict.fromkeys(celery_conf.declared_task_problems):
        messages.append(
            checks.Error(
                f"{where}: {msg}", hint="Fix the option on the task (see the README, Celery).", id="zklocks.E021"
            )
        )
    for where, msg, hint in dict.fromkeys(celery_conf.declared_task_warnings):
        messages.append(checks.Warning(f"{where}: {msg}", hint=hint, id="zklocks.W021"))
    for check_id, where, msg, hint in dict.fromkeys(celery_conf.declared_policy_messages(celery_conf.task_defaults())):
        cls = checks.Warning if check_id.startswith("zklocks.W") else checks.Error
        messages.append(cls(f"{where}: {msg}", hint=hint, id=check_id))
    if "celery" in sys.modules:  # only a project with a Celery app has tasks to look at
        from .celery.terminate import requeue_conflicts

        for where, msg in requeue_conflicts():
            messages.append(
                checks.Warning(
                    f"{where}: {msg}.",
                    hint="Set reject_on_worker_lost=False on the task, or use on_lost='cancel'.",
                    id="zklocks.W080",
                )
            )
    for app, why in unloaded:
        messages.append(
            checks.Warning(
                f"Celery app {app!r}: could not load its tasks to check their zklocks options ({why}).",
                hint="A worker of this app would fail the same way: fix the import error.",
                id="zklocks.W022",
            )
        )
    return messages


_UNSET = object()


def check_beat_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check of ZKLOCKS_BEAT (only when it is set): E030 SCHEDULER, E031 USING, E032 the rest, E090
    FENCE_WORKERS, E091 CATCH_UP, W030; and E092, a misspelt catch-up policy in CELERY_BEAT_SCHEDULE's entries."""
    from django.conf import settings

    from .celery import catchup

    messages: list[checks.CheckMessage] = [
        checks.Error(
            f"CELERY_BEAT_SCHEDULE[{name!r}]: option {catchup.OPTION!r}: {why}.",
            hint="Fix the entry's options; a beat would fall back to ZKLOCKS_BEAT['CATCH_UP'].",
            id="zklocks.E092",
        )
        for name, why in catchup.schedule_problems(getattr(settings, "CELERY_BEAT_SCHEDULE", None))
    ]
    raw = getattr(settings, "ZKLOCKS_BEAT", _UNSET)
    if raw is _UNSET:
        return messages
    configs = conf.get_config()[0]
    values, problems = celery_conf.validate_beat(raw, frozenset(configs), conf.alias_names())
    for p in problems:
        cls = checks.Warning if p.id.startswith("zklocks.W") else checks.Error
        messages.append(cls(p.msg, hint=p.hint, id=p.id))
    using = values["USING"]
    if isinstance(using, str) and using in configs and configs[using].read_only:
        messages.append(
            checks.Error(
                f"ZKLOCKS_BEAT: USING={using!r} is a READ_ONLY alias; beat's election and its ticks write to "
                "ZooKeeper, so no beat could ever lead.",
                hint="Name an alias that may write (the project's own identity).",
                id="zklocks.E031",
            )
        )
    scheduler = values["SCHEDULER"]
    if isinstance(scheduler, str) and scheduler.strip() and not any(p.id == "zklocks.E030" for p in problems):
        try:
            celery_conf.import_scheduler(scheduler)
        except Exception as exc:  # noqa: BLE001 ImportError, TypeError, or its models' (app not installed)
            messages.append(
                checks.Error(
                    f"ZKLOCKS_BEAT: SCHEDULER={scheduler!r} cannot be used: {exc}.",
                    hint='Name a Celery scheduler class, e.g. "celery.beat:PersistentScheduler" or '
                    '"django_celery_beat.schedulers:DatabaseScheduler" (with django_celery_beat in INSTALLED_APPS).',
                    id="zklocks.E030",
                )
            )
    return messages


HEALTH_KEYS = frozenset({"MAX_HOLD_SECONDS", "SHOW_LOCK_DETAILS"})
_SWITCHES = (
    ("ZKLOCKS_TRACING", "zklocks.E051", "OpenTelemetry spans"),
    ("ZKLOCKS_METRICS", "zklocks.E052", "Prometheus metrics"),
)


def check_other_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check of ZKLOCKS_HEALTH (E050, W050), ZKLOCKS_TRACING (E051), ZKLOCKS_METRICS (E052),
    ZKLOCKS_METRICS_FAMILY (E053) and ZKLOCKS_UNAVAILABLE_RETRY_AFTER (E054); an unset setting is fine."""
    from django.conf import settings

    from .contrib import metrics

    messages = health_messages(getattr(settings, "ZKLOCKS_HEALTH", None))
    for name, pid, what in _SWITCHES:
        value = getattr(settings, name, True)
        if not isinstance(value, bool):
            messages.append(
                checks.Error(
                    f"settings.{name} must be True or False, not {value!r}.",
                    hint=f"Only False turns the {what} off: {value!r} leaves them on.",
                    id=pid,
                )
            )
    try:
        metrics.resolve_family(getattr(settings, "ZKLOCKS_METRICS_FAMILY", None))
    except ZkConfigError as exc:
        messages.append(
            checks.Error(
                f"{exc}.",
                hint='Give a function that maps a lock name to a bounded label, or its dotted path ("myproject.'
                'metrics.lock_family"). Until then the metrics have no family label.',
                id="zklocks.E053",
            )
        )
    retry_after = getattr(settings, "ZKLOCKS_UNAVAILABLE_RETRY_AFTER", 5)
    if not middleware.is_seconds(retry_after):
        messages.append(
            checks.Error(
                "settings.ZKLOCKS_UNAVAILABLE_RETRY_AFTER must be a whole number of seconds >= 0, "
                f"not {retry_after!r}.",
                hint="It is the Retry-After header of ZkUnavailableMiddleware's 503 answers; for example 5 (the "
                "default).",
                id="zklocks.E054",
            )
        )
    return messages


def health_messages(raw: object) -> list[checks.CheckMessage]:
    """E050 / W050 for a ZKLOCKS_HEALTH value (None: unset, the health check has no MAX_HOLD_SECONDS). Pure."""
    hint = 'For example {"MAX_HOLD_SECONDS": 600}; leave MAX_HOLD_SECONDS out to not check how long locks are held.'
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [checks.Error(f"settings.ZKLOCKS_HEALTH must be a dict, not {raw!r}.", hint=hint, id="zklocks.E050")]
    messages: list[checks.CheckMessage] = []
    unknown = sorted(str(k) for k in set(raw) - HEALTH_KEYS)
    if unknown:
        messages.append(
            checks.Warning(
                f"ZKLOCKS_HEALTH: unknown option(s) {', '.join(unknown)}; the health check does not read them.",
                hint=conf.closest_hint(unknown, HEALTH_KEYS) + f"Known options: {', '.join(sorted(HEALTH_KEYS))}.",
                id="zklocks.W050",
            )
        )
    max_hold = raw.get("MAX_HOLD_SECONDS")
    if max_hold is not None and not conf.positive_number(max_hold):
        messages.append(
            checks.Error(
                f"ZKLOCKS_HEALTH: MAX_HOLD_SECONDS must be a positive number of seconds, not {max_hold!r}.",
                hint=hint,
                id="zklocks.E050",
            )
        )
    show = raw.get("SHOW_LOCK_DETAILS")
    if show is not None and not isinstance(show, bool):
        messages.append(
            checks.Error(
                f"ZKLOCKS_HEALTH: SHOW_LOCK_DETAILS must be True, False or None, not {show!r}.",
                hint="None (the default) names locks, hosts and pids only for aliases anyone may read; True names "
                "them for every alias, False for none.",
                id="zklocks.E050",
            )
        )
    return messages
