"""The admin page of lock holders and queues: ``/admin/zklocks/lock/``.

Rows come from ``zklocks.ops.read_model`` snapshots, never from a database table. Views go through
``admin_site.admin_view`` (staff login, CSRF, never_cache). Viewing needs ``zklocks.view_lock``;
force-release needs ``zklocks.force_release_lock``, is POST only, and writes a LogEntry.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from . import conf
from .exceptions import ZkLocksError
from .models import Lock
from .names import decode_name, shown
from .ops import deadlocks, queue_chart, read_model, snapshots
from .ops.force_release import force_release
from .ops.render import duration

REFRESH_CHOICES = (0, 2, 5, 10, 30)
QUEUE_PREVIEW = 10  # holders and waiters shown per row of the list
PER_PAGE = 100  # locks per page of the list
DETAIL_LIMIT = 500  # holders, and waiters, shown on the detail page (and in its picture)
PAGE_VAR = "p"


def _when(epoch: float | None) -> datetime.datetime | None:
    return None if epoch is None else datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)


def _contender_row(c: snapshots.Contender, now: float, position: int | None = None) -> dict:
    return {
        "c": c,
        "position": position,
        "since": duration(max(0.0, now - c.since)),
        "queued_at": _when(c.queued_at),
        "acquired_at": _when(c.acquired_at),
        "created_at": _when(c.created_at),
        "invalid": ", ".join(c.invalid),  # fields of hostile or broken node data, shown as "invalid"
    }


def _limited(lock: snapshots.LockInfo, limit: int) -> snapshots.LockInfo:
    """``lock`` with at most ``limit`` holders and ``limit`` waiters (for the picture)."""
    return dataclasses.replace(lock, holders=lock.holders[:limit], waiters=lock.waiters[:limit])


def shown_holders(values: list[str]) -> dict[str, int]:
    """The ``<node>:<czxid>`` values of the confirmation form as {node: czxid}; malformed ones are dropped."""
    chosen = {}
    for value in values:
        node, _, czxid = value.rpartition(":")
        if node and czxid.isdigit():
            chosen[node] = int(czxid)
    return chosen


class LockAdmin(admin.ModelAdmin):
    list_template = "admin/zklocks/lock/change_list.html"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @staticmethod
    def has_force_release_permission(request) -> bool:
        return request.user.has_perm("zklocks.force_release_lock")

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name

        def wrap(view):
            # These views read ZooKeeper, not the database: no request transaction (ATOMIC_REQUESTS) is held
            # open while a snapshot waits on an alias, and on SQLite the LogEntry write waits its turn.
            def plain(request, *args, **kwargs):
                return view(request, *args, **kwargs)

            return self.admin_site.admin_view(transaction.non_atomic_requests(plain))

        return [
            path("", wrap(self.changelist_view), name=f"{info[0]}_{info[1]}_changelist"),
            path("beat/", wrap(self.beat_view), name=f"{info[0]}_{info[1]}_beat"),
            path("<path:object_id>/change/", wrap(self.detail_view), name=f"{info[0]}_{info[1]}_change"),
            path("<path:object_id>/release/", wrap(self.release_view), name=f"{info[0]}_{info[1]}_release"),
        ]

    # -- helpers --

    def _context(self, request, title: str, **extra) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": title,
            "has_view_permission": True,
            "can_release": self.has_force_release_permission(request),
            **extra,
        }

    def _require_view(self, request) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def _detail_url(self, alias: str, node: str) -> str:
        return reverse(f"{self.admin_site.name}:zklocks_lock_change", args=(quote(Lock.make_key(alias, node)),))

    def _release_url(self, alias: str, node: str) -> str:
        return reverse(f"{self.admin_site.name}:zklocks_lock_release", args=(quote(Lock.make_key(alias, node)),))

    def _lookup(self, object_id: str) -> tuple[str, str]:
        try:
            alias, node = Lock.split_key(unquote(object_id))
        except ValueError:
            raise Http404("No such lock.") from None
        if alias not in conf.aliases():
            raise Http404("No such alias.")
        return alias, node

    # -- list --

    def changelist_view(self, request, extra_context=None):
        self._require_view(request)
        query = request.GET.get("q", "").strip()
        alias_filter = request.GET.get("alias", "")
        kind_filter = request.GET.get("kind", "")
        try:
            refresh = int(request.GET.get("refresh", "0"))
        except ValueError:
            refresh = 0
        refresh = refresh if refresh in REFRESH_CHOICES else 0
        aliases = conf.aliases()
        names = read_model.listing([alias_filter] if alias_filter in aliases else read_model.distinct_aliases(aliases))
        named = [lock for lock in names.locks if not query or query.casefold() in lock.name.casefold()]
        # Up to FULL_READ_LIMIT lock nodes every lock is read (totals, the kind filter, deadlocks across the
        # aliases); above it, only the page's, whatever the namespace holds.
        partial = len(names.locks) > read_model.FULL_READ_LIMIT
        if partial:
            kind_filter = ""  # a kind is known only once read: the filter is off, and its links go
            page = Paginator(named, PER_PAGE).get_page(request.GET.get(PAGE_VAR))
            snap = read_model.read_locks(list(page.object_list), names)
            page.object_list = snap.locks
            matching, shown_locks = named, snap.locks
        else:
            snap = read_model.read_locks(names.locks, names)  # all of them: totals and deadlocks whatever q says
            wanted = {(lock.alias, lock.node) for lock in named}
            matching = [
                lock
                for lock in snap.locks
                if (lock.alias, lock.node) in wanted and (not kind_filter or lock.kind == kind_filter)
            ]
            page = Paginator(matching, PER_PAGE).get_page(request.GET.get(PAGE_VAR))
            shown_locks = matching
        now = snap.taken_at
        rows = []
        for lock in page.object_list:
            rows.append(
                {
                    "lock": lock,
                    "url": self._detail_url(lock.alias, lock.node),
                    "held_for": duration(lock.held_for(now)),
                    "delay": lock.delay_text(now),
                    "holders": [_contender_row(h, now) for h in lock.holders[:QUEUE_PREVIEW]],
                    "more_holders": max(0, len(lock.holders) - QUEUE_PREVIEW),
                    "queue": [_contender_row(w, now, i) for i, w in enumerate(lock.waiters[:QUEUE_PREVIEW], 1)],
                    "more": max(0, lock.queue_length - QUEUE_PREVIEW),
                }
            )
        params = {"q": query, "alias": alias_filter, "kind": kind_filter, "refresh": refresh}

        def link(**change) -> str:
            merged = {k: v for k, v in {**params, **change}.items() if v not in ("", 0, None)}
            return "?" + urlencode(merged) if merged else "?"

        # Celery keys: what runs (holders that recorded a task id) and what is queued (the policies' nodes).
        task_keys = [
            {"lock": lock, "url": self._detail_url(lock.alias, lock.node), "running": lock.running_tasks}
            for lock in shown_locks
            if lock.queued_tasks or lock.running_tasks
        ][:PER_PAGE]
        found = [deadlocks.search(a.alias, a.locks) for a in snap.aliases]
        page_number = page.number if page.paginator.num_pages > 1 else 0

        context = self._context(
            request,
            "Locks",
            rows=rows,
            task_keys=task_keys,
            errors=[a.error for a in snap.errors],
            skipped=[f"alias {a.alias!r}: {line}" for a in snap.aliases for line in a.skipped],
            answered=len(snap.aliases) - len(snap.errors),
            deadlocks=[d for f in found for d in f.cycles],
            deadlock_notes=[f for f in found if f.truncated],
            page=page,
            page_links={
                "first": link(p=1),
                "previous": link(p=page.previous_page_number()) if page.has_previous() else None,
                "next": link(p=page.next_page_number()) if page.has_next() else None,
                "last": link(p=page.paginator.num_pages),
            },
            matching=len(matching),
            query=query,
            refresh=refresh,
            taken_at=_when(now),
            total=len(names.locks),
            held=sum(1 for lock in snap.locks if lock.holders),
            waiting=sum(lock.queue_length for lock in snap.locks),
            partial=partial,
            full_read_limit=read_model.FULL_READ_LIMIT,
            alias_filter=alias_filter,
            kind_filter=kind_filter,
            alias_choices=[{"value": a, "selected": a == alias_filter, "url": link(alias=a)} for a in aliases],
            alias_all_url=link(alias=""),
            kind_choices=[{"value": k, "selected": k == kind_filter, "url": link(kind=k)} for k in read_model.KINDS],
            kind_all_url=link(kind=""),
            refresh_choices=[{"value": r, "selected": r == refresh, "url": link(refresh=r)} for r in REFRESH_CHOICES],
            refresh_url=link(p=page_number),
            **(extra_context or {}),
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.list_template, context)

    # -- detail --

    def detail_view(self, request, object_id):
        self._require_view(request)
        alias, node = self._lookup(object_id)
        info, error = read_model.lock_info(alias, node=node)
        now = time.time()
        name = shown(info.name if info else decode_name(node))  # a foreign name may pose as another
        context = self._context(
            request,
            f"Lock {name}",
            alias=alias,
            name=name,
            lock=info,
            error=error,
            now=_when(now),
            held_for=duration(info.held_for(now)) if info else None,
            delay=info.delay_text(now) if info else None,
            holders=[_contender_row(h, now) for h in info.holders[:DETAIL_LIMIT]] if info else [],
            queue=[_contender_row(w, now, i) for i, w in enumerate(info.waiters[:DETAIL_LIMIT], 1)] if info else [],
            not_shown_holders=max(0, len(info.holders) - DETAIL_LIMIT) if info else 0,
            not_shown_waiters=max(0, len(info.waiters) - DETAIL_LIMIT) if info else 0,
            picture=queue_chart.picture(_limited(info, DETAIL_LIMIT), now) if info else None,
            release_url=self._release_url(alias, node),
            changelist_url=reverse(f"{self.admin_site.name}:zklocks_lock_changelist"),
        )
        if _read_only(alias):
            context["can_release"] = False  # its identity may read, not delete
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/zklocks/lock/detail.html", context)

    # -- Celery beat --

    def beat_view(self, request):
        """The beat election (ZKLOCKS_BEAT): leader and token, standbys, each entry's last send and next due."""
        from .celery import beat_status

        self._require_view(request)
        view = beat_status.read()
        now = time.time()
        leader = view["leader"]
        if leader:
            leader = {**leader, "for": duration(max(0.0, now - leader["since"])) if leader.get("since") else "?"}
        entries = [
            {**e, "last_sent": _when(e["last_sent_at"]), "next_due": _when(e["next_due"])} for e in view["entries"]
        ]
        context = self._context(
            request,
            "Celery beat",
            view=view,
            leader=leader,
            entries=entries,
            changelist_url=reverse(f"{self.admin_site.name}:zklocks_lock_changelist"),
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/zklocks/lock/beat.html", context)

    # -- force-release --

    def release_view(self, request, object_id):
        return require_http_methods(["GET", "POST"])(self._release)(request, object_id)

    def _release(self, request, object_id):
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        alias, node = self._lookup(object_id)
        if _read_only(alias):
            raise PermissionDenied(f"zklocks alias {alias!r} is READ_ONLY")
        detail_url = self._detail_url(alias, node)
        if request.method == "POST" and request.POST.get("post") == "yes":
            # Only the holder nodes the confirmation page showed, each with the czxid it showed: never
            # whoever holds the lock by the time the POST arrives.
            chosen = shown_holders(request.POST.getlist("holder"))
            if not chosen:
                self.message_user(
                    request,
                    f"Force-release of {decode_name(node)!r} (alias {alias!r}): the request "
                    "named no holder node (with its token) to delete, so nothing was released. Open "
                    "the force-release page again.",
                    messages.WARNING,
                )
                return HttpResponseRedirect(detail_url)
            try:
                result = force_release(alias, node, chosen)
            except LookupError:
                self.message_user(request, "That lock has no node any more: nothing to release.", messages.WARNING)
                return HttpResponseRedirect(detail_url)
            except ZkLocksError as exc:
                self.message_user(request, f"Force-release failed: {exc}", messages.ERROR)
                return HttpResponseRedirect(detail_url)
            self._log(request, alias, result)
            if result.deleted:
                self.message_user(
                    request,
                    (
                        f"Force-released {result.lock.name!r}: deleted {len(result.deleted)} holder node(s) "
                        f"(token{'s' if len(result.deleted) > 1 else ''} "
                        f"{', '.join(str(c.token) for c in result.deleted)}). The holder's process was not stopped."
                    ),
                    messages.SUCCESS,
                )
            if result.gone:
                self.message_user(request, "No longer holding, left alone: " + ", ".join(result.gone), messages.WARNING)
            if not result.deleted:
                self.message_user(
                    request,
                    f"The holders of {result.lock.name!r} (alias {alias!r}) changed since "
                    "the confirmation page: nothing was released. Look again.",
                    messages.WARNING,
                )
            return HttpResponseRedirect(detail_url)
        info, error = read_model.lock_info(alias, node=node)
        now = time.time()
        # A page of holders at a time (a shared lock may have thousands): the confirmation releases those shown.
        page = Paginator(info.holders if info else [], PER_PAGE).get_page(request.GET.get(PAGE_VAR))
        context = self._context(
            request,
            "Force-release a lock: are you sure?",
            alias=alias,
            lock=info,
            error=error,
            detail_url=detail_url,
            name=shown(info.name if info else decode_name(node)),  # a foreign name may pose as another
            holders=[_contender_row(h, now) for h in page.object_list],
            page=page,
            page_links={
                "previous": f"?{PAGE_VAR}={page.previous_page_number()}" if page.has_previous() else None,
                "next": f"?{PAGE_VAR}={page.next_page_number()}" if page.has_next() else None,
            },
            # Host, pid, thread, task and session are what the view permission shows: without it, the page
            # names each holder node and its token only (what the confirmation posts back).
            show_details=self.has_view_permission(request),
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/zklocks/lock/release_confirmation.html", context)

    def _log(self, request, alias: str, result) -> None:
        lock = result.lock
        if not result.deleted:
            return
        parts = [
            f"{c.node} (token {c.token}, session {c.session_hex}, host {c.host or '?'}, pid {c.pid or '?'})"
            for c in result.deleted
        ]
        LogEntry.objects.create(
            user_id=request.user.pk,
            content_type_id=ContentType.objects.get_for_model(Lock).pk,
            object_id=Lock.make_key(alias, lock.node),
            object_repr=str(Lock(alias=alias, name=lock.name))[:200],
            action_flag=CHANGE,
            change_message="Force-released holder node(s): " + "; ".join(parts),
        )


admin.site.register(Lock, LockAdmin)


def _read_only(alias: str) -> bool:
    try:
        return conf.alias_config(alias).read_only
    except ZkLocksError:
        return False  # an alias that is not configured: the view says so
