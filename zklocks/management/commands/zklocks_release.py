import logging

from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.exceptions import ZkLocksError
from zklocks.ops import read_model
from zklocks.ops.force_release import force_release
from zklocks.ops.render import clean, who

log = logging.getLogger("zklocks")

WARNING = (
    "This deletes the holder's node; it does not stop a live holder. The holder learns it at its next "
    "ensure_held(), and the next holder gets a higher fencing token."
)


class Command(BaseCommand):
    help = "Force-release a lock: delete its current holder's node (asks for confirmation unless --yes)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the lock name, exactly as the application uses it")
        parser.add_argument("--alias", default=conf.DEFAULT_ALIAS, help="the connection alias (default: default)")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def handle(self, *args, name, alias, yes=False, **options):
        if alias not in conf.aliases():
            raise CommandError(f"unknown zklocks alias {alias!r} (configured: {', '.join(conf.aliases())})")
        try:
            info, error = read_model.lock_info(alias, name)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if error:
            raise CommandError(error)
        if info is None or not info.holders:
            raise CommandError(f"lock {clean(name)!r} (alias {alias!r}) has no holder: nothing to release")
        self.stdout.write(f"lock {clean(info.name)!r} (alias {alias!r}, {info.kind or '-'}) is held by:")
        for h in info.holders:
            self.stdout.write(f"  {who(h)}  token {h.token}, session {h.session_hex}, node {clean(h.node)}")
        self.stdout.write(WARNING)
        if not yes and not self._confirm():
            raise CommandError("aborted: nothing was released")
        try:
            result = force_release(alias, info.node, {h.node: h.token for h in info.holders})
        except LookupError:
            raise CommandError("the lock node is gone: nothing was released") from None
        except ZkLocksError as exc:
            raise CommandError(str(exc)) from None
        for c in result.deleted:
            log.warning(
                "zklocks: force-released %r (alias %r): node %s, token %s, session %s",
                info.name,
                alias,
                c.node,
                c.token,
                c.session_hex,
            )
            self.stdout.write(f"released: node {clean(c.node)} (token {c.token})")
        for node in result.gone:
            self.stdout.write(f"no longer a holder, left alone: {clean(node)}")
        if not result.deleted:
            raise CommandError("the holders changed meanwhile: nothing was released; look again")

    def _confirm(self) -> bool:
        try:
            answer = input("Force-release? [y/N] ")
        except EOFError:
            return False
        return answer.strip().lower() in ("y", "yes")
