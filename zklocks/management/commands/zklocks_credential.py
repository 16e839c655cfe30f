"""Print an alias's ZooKeeper credential, for clients outside Django that share its paths (Curator, kazoo, zkCli)."""

from django.core.management.base import BaseCommand, CommandError

from zklocks import conf
from zklocks.exceptions import ZkConfigError


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

    def handle(self, *args, alias: str, bare: bool, **options):
        try:
            cfg = conf.alias_config(alias)
        except ZkConfigError as exc:
            raise CommandError(str(exc)) from exc
        digests = [cred for scheme, cred in cfg.auth if scheme == "digest"]
        if not digests:
            what = 'AUTH is "open"' if cfg.identity == "open" else "its AUTH has no digest credential"
            raise CommandError(f"zklocks alias {alias!r} has no digest credential to print: {what}")
        credential = digests[0]
        if bare:
            self.stdout.write(credential)
            return
        source = "derived from SECRET_KEY" if cfg.identity == "derived" else "from AUTH"
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
