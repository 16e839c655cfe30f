import json

from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.ops import read_model, snapshots
from zklocks.ops.render import clean, duration, table, who


class Command(BaseCommand):
    help = "Show every lock's holders and queue (all aliases, or --alias). Exits 1 if an alias cannot be read."

    def add_arguments(self, parser):
        parser.add_argument("--alias", action="append", help="only this alias (repeatable)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="machine-readable output")

    def handle(self, *args, alias=None, as_json=False, **options):
        snap = read_model.snapshot(alias or conf.aliases())
        if as_json:
            self.stdout.write(json.dumps(snap.to_dict(), indent=2, ensure_ascii=False))
        else:
            self._table(snap)
        if snap.errors:
            raise CommandError("; ".join(a.error for a in snap.errors), returncode=1)

    def _table(self, snap: snapshots.Snapshot) -> None:
        now = snap.taken_at
        if not snap.locks:
            if not snap.errors:  # an alias that could not be read is reported as the error, not as "no locks"
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
