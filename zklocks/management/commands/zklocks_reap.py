from django.core.management.base import BaseCommand

from zklocks import conf
from zklocks.connections import connections
from zklocks.reaper import sweep


class Command(BaseCommand):
    help = "Delete empty lock nodes below each alias's NAMESPACE (a background sweep does this too)."

    def add_arguments(self, parser):
        parser.add_argument("--alias", action="append", help="only this alias (repeatable)")

    def handle(self, *args, alias=None, **options):
        for name in alias or conf.aliases():
            pool = connections[name]
            removed = sweep(pool.session().client, pool.cfg.namespace)
            self.stdout.write(f"{name}: removed {removed} empty lock node(s)")
