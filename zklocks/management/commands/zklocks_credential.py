"""Print an alias's ZooKeeper credential, for clients outside Django that share its paths (Curator, kazoo, zkCli)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.exceptions import ZkConfigError
from zklocks.identity import derived_auth, project_keys


class Command(BaseCommand):
    help = (
        "Print the digest credential of a zklocks alias (derived from SECRET_KEY unless AUTH sets one), with the "
        "snippets that give it to a Curator or kazoo client. It is a secret: anyone with it can hand a lock over."
    )

    def add_arguments(self, parser):
        parser.add_argument("--alias", default=conf.DEFAULT_ALIAS, help="the alias (default: %(default)s)")
        parser.add_argument(
            "--bare", action="store_true", help="only the credential (user:password), for a script to read"
        )
        parser.add_argument(
            "--reader",
            action="store_true",
            help="the project's read-only credential instead: READ on the alias's nodes and nothing else, for a "
            "READ_ONLY alias of the admin, the health check or zklocks_status on another host",
        )

    def handle(self, *args, alias: str, bare: bool, reader: bool, **options):
        try:
            cfg = conf.alias_config(alias)
        except ZkConfigError as exc:
            raise CommandError(str(exc)) from exc
        if reader:
            self.print_reader(cfg, bare)
            return
        digests = [cred for scheme, cred in cfg.auth if scheme == "digest"]
        if not digests:
            what = 'AUTH is "open"' if cfg.identity == "open" else "its AUTH has no digest credential"
            raise CommandError(f"zklocks alias {alias!r} has no digest credential to print: {what}")
        credential = digests[0]
        if bare:
            self.stdout.write(credential)
            return
        source = "derived from SECRET_KEY" if cfg.identity == "derived" else "from AUTH"
        if cfg.read_only:
            self.stdout.write(f"# zklocks alias {alias!r} (READ_ONLY): read-only credential {source}.")
            self.stdout.write(credential)
            return
        self.stdout.write(f"# zklocks alias {alias!r}: digest credential {source}. Keep it secret.")
        self.stdout.write(credential)
        self.stdout.write("")
        self.stdout.write("# kazoo")
        self.stdout.write(f'KazooClient(hosts=..., auth_data=[("digest", "{credential}")],')
        user, password = credential.split(":", 1)
        self.stdout.write(f'            default_acl=[make_digest_acl("{user}", "{password}", all=True)])')
        self.stdout.write("# Curator (Java)")
        self.stdout.write(f'CuratorFrameworkFactory.builder().authorization("digest", "{credential}".getBytes())')
        self.stdout.write("    .aclProvider(/* CREATE, DELETE, WRITE, ADMIN for that digest id, READ for anyone */)")
        self.stdout.write("# zkCli.sh")
        self.stdout.write(f"addauth digest {credential}")
        if len(digests) > 1:
            self.stdout.write(
                f"# and {len(digests) - 1} more credential(s) of this alias (SECRET_KEY_FALLBACKS while a key is "
                "rotated): clients on the old key use those"
            )

    def print_reader(self, cfg: conf.AliasConfig, bare: bool) -> None:
        if cfg.identity != "derived":
            raise CommandError(
                f"zklocks alias {cfg.alias!r} has no derived identity (it sets AUTH or ACL): grant a reader of your "
                "own READ in its ACL, and give that credential to the READ_ONLY alias"
            )
        credential = derived_auth(project_keys(settings), reader=True)[0][1]
        if bare:
            self.stdout.write(credential)
            return
        self.stdout.write(
            f"# The read-only credential of alias {cfg.alias!r}'s project: READ on its nodes, nothing else "
            '(needed where READ_ACL="auth"). For a process without this SECRET_KEY:'
        )
        self.stdout.write(credential)
        self.stdout.write("")
        self.stdout.write(f"ZKLOCKS = {{{cfg.alias!r}: {{")
        self.stdout.write(f"    {'HOSTS'!r}: {cfg.hosts!r}, {'NAMESPACE'!r}: {cfg.namespace!r},")
        self.stdout.write(f"    {'READ_ACL'!r}: {cfg.read_acl!r}, {'LAYOUT'!r}: {cfg.layout!r},")
        self.stdout.write(f'    {"READ_ONLY"!r}: True, {"AUTH"!r}: [("digest", "{credential}")],')
        self.stdout.write("    # and the OPTIONS of TLS (use_ssl, ca, ...) if this alias has them")
        self.stdout.write("}}")
        if len(cfg.auth) > 1:
            self.stdout.write(
                "# SECRET_KEY_FALLBACKS are set: nodes made under an old key grant its own reader until "
                "`manage.py zklocks_check --fix-acls` moves them; --reader prints the current key's"
            )
