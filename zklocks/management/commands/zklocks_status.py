import datetime
import time

from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.ops import read_model, snapshots
from zklocks.ops.render import clean, duration, json_text, table, who


class Command(BaseCommand):
    help = "Show every lock's holders and queue (all aliases, or --alias). Exits 1 if an alias cannot be read."

    def add_arguments(self, parser):
        parser.add_argument("--alias", action="append", help="only this alias (repeatable)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="machine-readable output")
        parser.add_argument(
            "--beat", action="store_true", help="the Celery beat election (ZKLOCKS_BEAT) and its entries instead"
        )
        parser.add_argument(
            "--limit",
            type=int,
            default=read_model.FULL_READ_LIMIT,
            help="read at most this many locks, the first by name; the others are counted (default: %(default)s)",
        )
        parser.add_argument("--name", default="", help="only locks whose name contains this text")

    def handle(self, *args, alias=None, as_json=False, beat=False, limit=None, name="", **options):
        if beat:
            self._beat(alias[0] if alias else None, as_json)
            return
        if limit is not None and limit < 0:
            raise CommandError("--limit must be 0 or more")
        # Names first (one request per alias), then only the locks shown: bounded whatever the namespace holds.
        names = read_model.listing(alias or read_model.distinct_aliases(conf.aliases()))
        wanted = [lock for lock in names.locks if name.casefold() in lock.name.casefold()]
        not_read = max(0, len(wanted) - limit) if limit is not None else 0
        snap = read_model.read_locks(wanted[: len(wanted) - not_read], names)
        if as_json:
            self.stdout.write(json_text({**snap.to_dict(), "not_read": not_read}))
        else:
            self._table(snap, counted_only=not_read)
            for a in snap.aliases:
                for line in a.skipped:
                    self.stderr.write(f"alias {a.alias!r}: {line}")
            if not_read:
                self.stdout.write(f"... and {not_read} more lock(s) not read (--limit {limit}; --name filters)")
        if snap.errors:
            raise CommandError("; ".join(a.error or "" for a in snap.errors), returncode=1)

    def _table(self, snap: snapshots.Snapshot, counted_only: int = 0) -> None:
        now = snap.taken_at
        if not snap.locks:
            # an alias that could not be read is reported as the error, and locks only counted (--limit) by their
            # count, never as "no locks"
            if not snap.errors and not counted_only:
                self.stdout.write("no locks")
            return
        rows = [["ALIAS", "NAME", "KIND", "HOLDER", "HELD FOR", "TOKEN", "QUEUE"]]
        queue_after: dict[int, snapshots.LockInfo] = {}  # table row index -> lock whose queue follows it
        for lock in snap.locks:
            kind = (lock.kind or "-") + (f"({lock.max_leases})" if lock.max_leases else "")
            first = [clean(lock.alias), clean(lock.name), kind]
            for i, h in enumerate(lock.holders or [None]):
                rows.append(
                    (first if i == 0 else ["", "", ""])
                    + [
                        who(h) if h else "-",
                        duration(lock.held_for(now)) if h and i == 0 else "",
                        str(h.token) if h else "-",
                        str(lock.queue_length) if i == 0 else "",
                    ]
                )
            queue_after[len(rows) - 1] = lock
        for idx, line in enumerate(table(rows)):
            self.stdout.write(line)
            if idx in queue_after and (delay := queue_after[idx].delay_text(now)):
                self.stdout.write(f"    {delay}")
            for pos, w in enumerate(queue_after[idx].waiters if idx in queue_after else [], 1):
                self.stdout.write(
                    f"    {pos}. {who(w)}  (waiting {duration(max(0.0, now - w.since))}, {w.mode}, token {w.token})"
                )

    def _beat(self, alias: str | None, as_json: bool) -> None:
        from zklocks.celery import beat_status

        view = beat_status.read(alias)
        if as_json:
            self.stdout.write(json_text(view))
        else:
            self._beat_table(view)
        if view.get("error"):
            raise CommandError(view["error"], returncode=1)

    def _beat_table(self, view: dict) -> None:
        now = time.time()
        self.stdout.write(f"beat election {clean(view['election'])!s} (alias {clean(view['alias'])})")
        leader = view["leader"]
        if leader:
            since = duration(max(0.0, now - leader["since"])) if leader.get("since") else "?"
            self.stdout.write(
                f"leader:   {clean(str(leader['host']))} pid {clean(str(leader['pid']))} (token {leader['token']}, "
                f"leading for {since})"
            )
        else:
            self.stdout.write("leader:   none")
        for standby in view["standbys"]:
            self.stdout.write(
                f"standby:  {clean(str(standby['host']))} pid {clean(str(standby['pid']))} (token {standby['token']})"
            )
        rows = [["ENTRY", "LAST SENT", "TOKEN", "HOST", "NEXT DUE", "CATCH-UP"]]
        for entry in view["entries"]:
            sent, due = entry["last_sent_at"], entry["next_due"]
            rows.append(
                [
                    clean(entry["name"]),
                    _at(sent) if sent else "-",
                    str(entry["last_token"]) if entry["last_token"] is not None else "-",
                    clean(entry["last_host"] or "-"),
                    _at(due) if due else "-",
                    clean(entry["catch_up"] or f"({view['default_catch_up']})"),
                ]
            )
        for line in table(rows):
            self.stdout.write(line)


def _at(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
