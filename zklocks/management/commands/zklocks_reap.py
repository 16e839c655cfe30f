import shlex

from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.client.pools import connections
from zklocks.names import decode_name, join_path
from zklocks.ops.reaper import internal_children, recycle, sweep


class Command(BaseCommand):
    help = (
        "Delete empty lock nodes below each alias's NAMESPACE (a background sweep does this too), and report lock "
        "nodes in use that near the end of their 2**31-1 sequence numbers. --recycle NAME waits for that lock's "
        "next empty moment and deletes its node then, so the next contender re-creates it with a fresh counter "
        "(the cure for SequenceExhausted)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--alias", action="append", help="only this alias (repeatable)")
        parser.add_argument(
            "--recycle",
            action="append",
            metavar="NAME",
            help="recycle this lock's node at its next empty moment (repeatable; needs one --alias "
            "unless the lock is on 'default')",
        )
        parser.add_argument(
            "--wait", type=float, default=60.0, help="seconds --recycle waits for an empty moment (default 60)"
        )

    def handle(self, *args, alias=None, recycle=None, wait=60.0, **options):
        if recycle:
            self._recycle(alias, recycle, wait)
            return
        for name in alias or conf.aliases():
            pool = connections[name]
            worn: list[tuple[str, int]] = []
            removed = sweep(pool.session().client, pool.cfg.namespace, worn, internal_children(pool.cfg))
            self.stdout.write(f"{name}: removed {removed} empty lock node(s)")
            for node, used in worn:
                self.stdout.write(
                    f"{name}: lock node {node} has used {used} of 2147483647 sequence numbers; "
                    f"recycle it with --alias {name} --recycle {shlex.quote(decode_name(node))}"
                )

    def _recycle(self, aliases, names, wait):
        if aliases and len(aliases) > 1:
            raise CommandError("--recycle takes at most one --alias")
        alias = aliases[0] if aliases else "default"
        pool = connections[alias]
        failed = []
        for name in names:
            path = join_path(pool.cfg.namespace, name)
            if recycle(pool.session().client, path, wait, internal_children(pool.cfg)):
                self.stdout.write(f"{alias}: recycled lock node {path} of {name!r}")
            else:
                failed.append(name)
                self.stderr.write(
                    f"{alias}: lock node {path} of {name!r} was never empty within {wait:g}s; "
                    "run again, or stop its clients for a moment"
                )
        if failed:
            raise CommandError(f"not recycled: {', '.join(map(repr, failed))}")
