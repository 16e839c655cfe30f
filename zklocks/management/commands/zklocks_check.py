"""``manage.py zklocks_check``: can each alias reach ZooKeeper, are its namespace's ACLs as configured, and can the
lease cover its servers' tickTime and session bounds (client/serverconf.py)? Exits non-zero on any problem. See
docs/operations.md, "Checking a deployment", and docs/security.md, "The ACL audit" (and ops/acl_audit.py).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError

from zklocks import conf
from zklocks.client import serverconf
from zklocks.exceptions import ZkAuthError, ZkConfigError, ZkUnavailable
from zklocks.ops import acl_audit, read_model

_FINDING = {
    "weaker": "weaker ACL than configured: {detail}",
    "no-access": "{detail} (every lock would fail with NoAuth)",
    "ancestor": "a parent of the namespace: {detail}",
    "hidden": "{detail}",
    "old-key": "{detail} (--fix-acls moves it to the current key)",
    "no-reader": "{detail} (--fix-acls grants it)",
}


class Command(BaseCommand):
    help = (
        "Check each zklocks alias: connectivity, AUTH credentials and the ACLs of its namespace. "
        "Exits with status 1 on any problem."
    )

    def add_arguments(self, parser):
        parser.add_argument("--alias", action="append", help="only this alias (repeatable)")
        parser.add_argument(
            "--fix-acls",
            action="store_true",
            help="give nodes with a weaker ACL the configured one (needs ADMIN on them)",
        )
        parser.add_argument(
            "--limit", type=int, default=None, help="check at most this many lock nodes per alias (default: all)"
        )

    def handle(self, *args, alias=None, fix_acls=False, limit=None, **options):
        configs, _ = conf.get_config()
        names = alias or sorted(configs)
        if not names:
            raise CommandError("settings.ZKLOCKS defines no usable alias; run `manage.py check`.")
        failures = 0
        for name in names:
            if name not in configs:
                try:
                    conf.alias_config(name)  # the clear error for an unknown or invalid alias
                except ZkConfigError as exc:
                    self._fail(name, str(exc))
                failures += 1
                continue
            failures += self.check_alias(configs[name], fix_acls, limit)
        if failures:
            raise CommandError(f"zklocks_check: {failures} problem(s) found")

    def _check_reader(self, cfg: conf.AliasConfig, session, fix_acls: bool) -> int:
        """A READ_ONLY alias: it must read the namespace, and it writes nothing (no audit, no write probe)."""
        name = cfg.alias
        source = "derived from SECRET_KEY" if cfg.identity == "derived" else "as configured"
        self._ok(name, f"READ_ONLY: identity {source}; it takes no lock and fixes no ACL")
        if fix_acls:
            self._note(name, "--fix-acls skipped: a READ_ONLY alias changes nothing")
        try:
            children = session.client.get_children(cfg.namespace)
        except NoNodeError:
            self._ok(name, f"{cfg.namespace} does not exist yet: nothing to read")
            return 0
        except NoAuthError:
            self._fail(
                name,
                f'cannot read {cfg.namespace}: its nodes do not grant this identity READ (READ_ACL="auth" '
                "grants it to the project's read-only identity only: AUTH left out, or the credential "
                "`manage.py zklocks_credential --reader` prints)",
            )
            return 1
        except KazooException as exc:
            self._fail(name, f"could not read {cfg.namespace}: {exc!r}")
            return 1
        # Every lock, as the admin reads it: a lock node or contender that refuses this identity fails here.
        snap = read_model.read_alias(cfg.alias)
        problem = snap.error or (
            f"{len(snap.refused)} node(s) refuse it, e.g. {snap.refused[0]}" if snap.refused else None
        )
        if problem:
            self._fail(name, f"could not read every lock: {problem} (manage.py zklocks_check --fix-acls, run "
                       "with the project's identity, grants the read-only identity READ)")  # fmt: skip
            return 1
        self._ok(name, f"read {cfg.namespace}: {len(children)} lock node(s), {len(snap.locks)} lock(s) read")
        return 0

    def check_alias(self, cfg: conf.AliasConfig, fix_acls: bool, limit: int | None) -> int:
        name = cfg.alias
        try:
            session = acl_audit.connect(cfg)
        except (ZkUnavailable, ZkAuthError) as exc:
            self._fail(name, str(exc))
            return 1
        failures = 0
        try:
            self._ok(name, f"connected to {cfg.hosts} (session timeout {session.timeout:g}s)")
            if session.timeout != cfg.session_timeout:
                self._note(
                    name,
                    f"the server gave a session timeout of {session.timeout:g}s instead of "
                    f"SESSION_TIMEOUT={cfg.session_timeout:g}s: servers allow 2 to 20 times their tickTime "
                    "(minSessionTimeout, maxSessionTimeout in zoo.cfg); set SESSION_TIMEOUT within those bounds",
                )
            failures += self._check_servers(cfg)
            if cfg.read_only:
                return failures + self._check_reader(cfg, session, fix_acls)
            ids = sorted(user for _, user in acl_audit.identities(cfg))
            if acl_audit.expected_acl(cfg) is None:
                self._note(name, 'AUTH is "open": any client may create and delete lock nodes')
            elif cfg.identity == "derived":
                keys = len(cfg.auth)
                self._ok(
                    name,
                    "identity: derived from SECRET_KEY"
                    + (f" and {keys - 1} key(s) of SECRET_KEY_FALLBACKS" if keys > 1 else "")
                    + " (manage.py zklocks_credential prints it for other clients)",
                )
            elif ids:
                self._ok(name, "identity: digest user(s) " + ", ".join(repr(i.split(":", 1)[0]) for i in ids))
            try:
                result = acl_audit.audit(session, limit=limit)
            except (ZkAuthError, ZkUnavailable, KazooException) as exc:
                self._fail(name, f"could not read the ACLs of {cfg.namespace}: {exc}")
                return 1
            if not result.exists:
                for finding in result.findings:  # a parent that lets others make the namespace first
                    self._fail(name, f"{finding.path}: {_FINDING[finding.kind].format(detail=finding.detail)}")
                    failures += 1
                self._ok(
                    name, f"{cfg.namespace} does not exist yet; it is created with the configured ACL on first use"
                )
                return failures
            if fix_acls and result.fixable:
                try:
                    for path in acl_audit.fix(session, result):
                        self._ok(name, f"fixed the ACL of {path}")
                    result = acl_audit.audit(session, limit=limit)
                except (KazooException, ZkAuthError) as exc:
                    self._fail(name, f"could not fix the ACLs: {exc!r}")
                    failures += 1
            for finding in result.findings:
                self._fail(name, f"{finding.path}: {_FINDING[finding.kind].format(detail=finding.detail)}")
                failures += 1
            scope = f"{cfg.namespace} and {result.checked - 1} node(s) below it"
            if result.truncated:
                self._note(
                    name,
                    f"the audit stopped at --limit {limit}: {result.not_checked} or more node(s) below "
                    f"{cfg.namespace} were not checked",
                )
            if result.unproven:
                users = ", ".join(repr(u.split(":", 1)[0]) for _, u in sorted(acl_audit.identities(cfg)))
                self._note(
                    name,
                    f"ZooKeeper shows digest ids without their password hash ('user:x') to a client without ADMIN, "
                    f"which the configured ACL does not give: on {len(result.unproven)} node(s) an entry of user "
                    f"{users} cannot be told from another password of that user by reading; the write probe below "
                    f"proves this identity's CREATE and DELETE in {cfg.namespace} only",
                )
            if not result.findings:
                self._ok(name, f"ACLs as configured on {scope}" + (" (the part checked)" if result.truncated else ""))
            try:
                acl_audit.probe(session)
                self._ok(name, f"created and deleted a node in {cfg.namespace}")
            except ZkAuthError as exc:
                self._fail(name, str(exc))
                failures += 1
            except KazooException as exc:
                self._fail(name, f"write probe in {cfg.namespace} failed: {exc!r}")
                failures += 1
        finally:
            session.close()
        return failures

    def _check_servers(self, cfg: conf.AliasConfig) -> int:
        """The servers' tickTime and session bounds, read through ``conf``, against the lease's relay gap."""
        name = cfg.alias
        servers, unread = serverconf.read_all(cfg.hosts, min(cfg.connect_timeout, 2.0))
        problems, notes = serverconf.lease_problems(servers, cfg.session_timeout, cfg.tick_time)
        for text in problems:
            self._fail(name, text)
        for text in notes:
            self._note(name, text)
        for why in unread:
            self._note(name, f"tickTime and session bounds not checked: {why}")
        if servers and not problems:
            ticks = sorted({s.tick_ms for s in servers})
            given = sorted({s.negotiates(cfg.session_timeout) for s in servers})
            gap = f"TICK_TIME={cfg.tick_time:g}s" if cfg.tick_time else f"half the session, {min(given) / 2:g}s"
            self._ok(
                name,
                f"tickTime {'/'.join(map(str, ticks))} ms, session {'/'.join(f'{t:g}' for t in given)}s on "
                f"{len(servers)} server(s): the lease waits a whole tick for the leader ({gap})",
            )
        return len(problems)

    def _ok(self, alias: str, text: str) -> None:
        self.stdout.write(f"{alias}: " + self.style.SUCCESS("ok") + f" {text}")

    def _note(self, alias: str, text: str) -> None:
        self.stdout.write(f"{alias}: " + self.style.WARNING("note") + f" {text}")

    def _fail(self, alias: str, text: str) -> None:
        self.stdout.write(f"{alias}: " + self.style.ERROR("FAILED") + f" {text}")
