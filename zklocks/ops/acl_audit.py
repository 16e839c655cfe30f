"""ACL audit of an alias's namespace: weaker ACLs than configured, and an identity that lacks its rights. Why a node's
parent's ACL matters (ZooKeeper checks CREATE and DELETE there), the namespace's parent's too, and what ZooKeeper's
getACL hides (tested in tests/admin_cli/test_audit.py): docs/security.md, "AUTH and ACLs, per alias" and "The ACL
audit".

``audit()`` reads ACLs only; ``probe()`` also creates and deletes one ephemeral node, to prove by writing, as this
identity only, what a masked getACL cannot show. Both are used by ``manage.py zklocks_check`` and by the deploy
system check (zklocks.E015, E018, W002, W003, W005, W006).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kazoo.exceptions import AuthFailedError, NoAuthError, NoNodeError
from kazoo.security import ACL, Id, Permissions

from .. import conf
from ..client.kazoo_options import build_acl, digest_id, identities
from ..client.session import Session
from ..exceptions import ZkUnavailable
from ..identity import USER
from ..recipes import layout
from ..recipes.kazoo_calls import translate

PERMISSIONS = (
    ("READ", Permissions.READ),
    ("WRITE", Permissions.WRITE),
    ("CREATE", Permissions.CREATE),
    ("DELETE", Permissions.DELETE),
    ("ADMIN", Permissions.ADMIN),
)
# What this alias needs on the namespace and on every lock node.
NEEDED = Permissions.CREATE | Permissions.DELETE | Permissions.READ
WORLD = Id("world", "anyone")
# Schemes whose members we cannot tell from settings (x509 client certificates, sasl, ip, ...): an entry of
# these might be us, so it never counts as "missing rights", but it does count as a grant to someone else.
_OPAQUE = ("ip", "x509", "sasl", "auth", "super")
# How many nodes below the namespace the deploy check audits; past them it says so (zklocks.E018).
DEPLOY_LIMIT = 5000
PROBE_PREFIX = ".zklocks-check-"


def perm_names(perms: int) -> str:
    return ", ".join(name for name, bit in PERMISSIONS if perms & bit) or "nothing"


def expected_acl(cfg: conf.AliasConfig) -> list[ACL] | None:
    """The ACL zklocks gives every node of the alias; None means ZooKeeper's open ACL (no identity set)."""
    return build_acl(cfg)


def _masked(ident: Id) -> bool:
    """ZooKeeper shows a digest id as "user:x" to a client without ADMIN on the node."""
    return ident.scheme == "digest" and ident.id.endswith(":x")


def _user(ident: Id) -> str:
    return ident.id.split(":", 1)[0]


def _grants(acl: list[ACL], by_user: bool = False) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for entry in acl:
        key = (entry.id.scheme, _user(entry.id) if by_user and entry.id.scheme == "digest" else entry.id.id)
        out[key] = out.get(key, 0) | entry.perms
    return out


def extra_grants(actual: list[ACL], expected: list[ACL], cfg: conf.AliasConfig | None = None) -> list[str]:
    """Rights the node grants beyond the expected ACL, e.g. ["world:anyone may WRITE, CREATE, DELETE, ADMIN"].
    A masked digest id ("user:x") can only be told apart by its user name."""
    my_users = {ident.split(":", 1)[0] for _, ident in identities(cfg)} if cfg is not None else set()
    allowed = _grants(expected)
    allowed_by_user = _grants(expected, by_user=True)
    out = []
    for (scheme, ident), perms in sorted(_grants(actual).items()):
        if _masked(Id(scheme, ident)):
            extra = perms & ~allowed_by_user.get((scheme, ident.split(":", 1)[0]), 0)
        else:
            extra = perms & ~allowed.get((scheme, ident), 0)
        if extra:
            other = (
                " (another password)"
                if scheme == "digest" and not _masked(Id(scheme, ident)) and (ident.split(":", 1)[0] in my_users)
                else ""
            )
            out.append(f"{scheme}:{_shown(scheme, ident)}{other} may {perm_names(extra)}")
    return out


def missing_rights(actual: list[ACL], cfg: conf.AliasConfig) -> int:
    """Permission bits of NEEDED that no entry of the node's ACL can give this alias (0: none missing)."""
    mine = identities(cfg)
    my_users = {ident.split(":", 1)[0] for _, ident in mine}
    granted = 0
    for entry in actual:
        key = (entry.id.scheme, entry.id.id)
        if key == (WORLD.scheme, WORLD.id) or key in mine or entry.id.scheme in _OPAQUE:
            granted |= entry.perms
        elif _masked(entry.id) and _user(entry.id) in my_users and not entry.perms & Permissions.ADMIN:
            # Masked because we lack ADMIN: an entry with ADMIN is surely not us, one without might be.
            granted |= entry.perms
    return NEEDED & ~granted


def _shown(scheme: str, ident: str) -> str:
    # A digest id is "user:base64(sha1)": the hash is no secret, but the user name is all a reader needs.
    return ident.split(":", 1)[0] if scheme == "digest" else ident


@dataclass
class Finding:
    path: str
    kind: str  # "weaker" | "no-access" | "ancestor" | "hidden" | "old-key" | "no-reader"
    detail: str


@dataclass
class AuditResult:
    alias: str
    namespace: str
    exists: bool = False
    checked: int = 0
    truncated: bool = False
    not_checked: int = 0  # nodes past the limit (at least this many)
    open_by_config: bool = False  # no AUTH/ACL: nodes are open to anyone by the settings' choice
    findings: list[Finding] = field(default_factory=list)
    # Nodes whose digest ids ZooKeeper showed as "user:x", with an entry of this alias's user that could be
    # another password's (the configured ACL gives this identity no ADMIN, so that is expected, but unprovable).
    unproven: list[str] = field(default_factory=list)

    @property
    def weaker(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "weaker"]

    @property
    def fixable(self) -> list[Finding]:
        """What ``--fix-acls`` gives the expected ACL: weaker nodes, nodes of an old key (a rotation), and nodes
        the project's read-only identity may not read."""
        return [f for f in self.findings if f.kind in ("weaker", "old-key", "no-reader")]

    @property
    def no_access(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "no-access"]

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


def connect(cfg: conf.AliasConfig) -> Session:
    """A short-lived session of the alias (same client options as the lock pool); ZkUnavailable within
    CONNECT_TIMEOUT."""
    session = Session(cfg)
    session.start()
    return session


def audit(session: Session, limit: int | None = None, deadline: float | None = None) -> AuditResult:
    """Compare the ACLs of the namespace's ancestors, of the namespace and of every node below it (lock nodes,
    semaphore mutexes, contenders) with the expected ACL, level by level (each level pipelined). Reads only.
    At most ``limit`` nodes below the namespace (``truncated`` says when it stopped). ZkAuthError if ZooKeeper
    refuses to show the namespace; ZkUnavailable past ``deadline``."""
    cfg = session.cfg
    client = session.client
    result = AuditResult(cfg.alias, cfg.namespace)
    expected = expected_acl(cfg)
    if expected is None:
        result.open_by_config = True
        expected = [ACL(Permissions.ALL, WORLD)]
    timeout = _remaining(deadline, cfg)
    try:
        acl, _ = client.get_acls_async(cfg.namespace).get(timeout=timeout)
        result.exists = True
    except NoNodeError:
        pass
    except (NoAuthError, AuthFailedError) as exc:
        raise _auth_error(cfg, exc) from exc
    if not result.open_by_config:
        _audit_ancestors(session, result, deadline)
    if not result.exists:
        return result  # created with the expected ACL on first use
    _judge(result, cfg.namespace, acl, expected, cfg, parent=True)
    internal = set(layout.get(cfg.layout).internal_children)
    level, depth = [cfg.namespace], 0
    while level and not result.truncated:
        depth += 1
        listed = [(p, client.get_children_async(p)) for p in level]  # pipelined: one round trip per level
        below: list[tuple[str, bool]] = []
        for path, answer in listed:
            try:
                children = sorted(answer.get(timeout=_remaining(deadline, cfg)))
            except NoNodeError:
                continue  # released meanwhile
            except NoAuthError as exc:
                if path == cfg.namespace:
                    raise _auth_error(cfg, exc) from exc
                _unreadable(result, path, "list its children", counted=True)  # one such must not end the audit
                continue
            for child in children:
                if depth == 1 and child.startswith(PROBE_PREFIX):
                    continue  # another check's probe
                below.append((f"{path}/{child}", depth == 1 or (depth == 2 and child in internal)))
        if limit is not None and result.checked - 1 + len(below) > limit:
            keep = max(0, limit - (result.checked - 1))
            result.truncated, result.not_checked = True, len(below) - keep
            below = below[:keep]
        pending = [(p, parent, client.get_acls_async(p)) for p, parent in below]
        level = []
        for path, parent, answer in pending:
            try:
                acl, _ = answer.get(timeout=_remaining(deadline, cfg))
            except NoNodeError:
                continue
            except NoAuthError:
                _unreadable(result, path, "read its ACL")
                continue
            _judge(result, path, acl, expected, cfg, parent=parent)
            level.append(path)
    return result


def _unreadable(result: AuditResult, path: str, what: str, counted: bool = False) -> None:
    if not counted:  # a node whose ACL was judged, but whose children we may not list, is counted already
        result.checked += 1
    result.findings.append(
        Finding(
            path,
            "no-access",
            f"the configured identity may not {what} (NoAuth): made by someone else, or under a lost key",
        )
    )


def _ancestors(path: str) -> list[str]:
    steps = path.strip("/").split("/")
    return ["/"] + ["/" + "/".join(steps[:i]) for i in range(1, len(steps))]


def _foreign_rights(acl: list[ACL], cfg: conf.AliasConfig) -> dict[str, int]:
    """Rights an ancestor's ACL gives anyone but this alias's identity, by who ("world:anyone", "digest:bob")."""
    mine = identities(cfg)
    my_users = {ident.split(":", 1)[0] for _, ident in mine}
    out: dict[str, int] = {}
    for entry in acl:
        key = (entry.id.scheme, entry.id.id)
        if key in mine:
            continue
        who = f"{entry.id.scheme}:{_shown(entry.id.scheme, entry.id.id)}"
        if entry.id.scheme == "digest" and _user(entry.id) in my_users:
            if _masked(entry.id) and not entry.perms & Permissions.ADMIN:
                continue  # might be us: ZooKeeper hides the hash from a client without ADMIN
            who += " (another password)"  # shown in full, or masked with ADMIN (we lack it): not us
        out[who] = out.get(who, 0) | entry.perms
    return out


def _audit_ancestors(session: Session, result: AuditResult, deadline: float | None) -> None:
    """The namespace's parent must not let anyone else delete the namespace (DELETE, or ADMIN to grant it) and,
    while the namespace does not exist, its deepest existing ancestor must not let anyone else create the path
    (CREATE or ADMIN): either way they could make the namespace anew with an ACL of their own. Higher ancestors
    cannot be deleted while they hold the namespace."""
    cfg = session.cfg
    paths = _ancestors(cfg.namespace)
    answers = [(p, session.client.get_acls_async(p)) for p in paths]
    found: dict[str, list[ACL] | None] = {}
    for path, answer in answers:
        try:
            found[path] = answer.get(timeout=_remaining(deadline, cfg))[0]
        except NoNodeError:
            found[path] = None
        except (NoAuthError, AuthFailedError):
            result.findings.append(
                Finding(path, "ancestor", f"this identity may not read the ACL of {path}, a parent of the namespace")
            )
            return
    parent = paths[-1]
    if result.exists:
        at, bits, harm = parent, Permissions.DELETE | Permissions.ADMIN, "delete"
    else:
        at = next(p for p in reversed(paths) if found[p] is not None)  # "/" always exists
        bits, harm = Permissions.CREATE | Permissions.ADMIN, "create"
    acl = found[at]
    if acl is None:
        return
    if _made_under_another_key(acl, cfg):
        result.findings.append(
            Finding(
                at,
                "old-key",
                "a parent of the namespace made under another SECRET_KEY of this project (the ACL zklocks gives its "
                "nodes, for that key's identity)",
            )
        )
        return
    for who, perms in sorted(_foreign_rights(acl, cfg).items()):
        if perms & bits:
            what = (
                f"they can delete {cfg.namespace} whenever it has no lock nodes and create it again with an ACL of "
                "their own"
                if harm == "delete"
                else f"they can create {cfg.namespace} before this alias does, with an ACL of their own"
            )
            result.findings.append(
                Finding(at, "ancestor", f"{who} may {perm_names(perms & (bits | Permissions.CREATE))} there: {what}")
            )


def gives_admin(cfg: conf.AliasConfig) -> bool:
    """Whether the configured ACL gives this alias's identity ADMIN (then ZooKeeper shows it every digest id)."""
    acl = expected_acl(cfg) or []
    mine = identities(cfg)
    return any(entry.perms & Permissions.ADMIN and (entry.id.scheme, entry.id.id) in mine for entry in acl)


def _judge(
    result: AuditResult, path: str, acl: list[ACL], expected: list[ACL], cfg: conf.AliasConfig, parent: bool
) -> None:
    """``parent``: a node below which this alias creates and deletes (the namespace, a lock node, a mutex)."""
    result.checked += 1
    if result.open_by_config:
        return
    extra = extra_grants(acl, expected, cfg)
    if extra:
        result.findings.append(Finding(path, "weaker", "; ".join(extra)))
    missing = missing_rights(acl, cfg) if parent else 0
    if missing:
        result.findings.append(Finding(path, "no-access", f"the configured identity may not {perm_names(missing)}"))
    elif cfg.identity == "derived" and not _grants_current_key(acl, cfg):
        result.findings.append(
            Finding(
                path,
                "old-key",
                "made under a SECRET_KEY that is now only in SECRET_KEY_FALLBACKS: the current key's identity may "
                "not write or delete it, and the node is lost to the project once that fallback goes",
            )
        )
    readers_granted = cfg.readers and cfg.read_acl == "auth"  # as build_acl grants them
    if readers_granted and not _grants(acl).get(("digest", cfg.readers[0]), 0) & Permissions.READ:
        result.findings.append(
            Finding(
                path,
                "no-reader",
                'the project\'s read-only identity may not read it (made before READ_ACL="auth" granted it, under '
                "an old key, or by a peer): a READ_ONLY alias cannot see it",
            )
        )
    my_users = {ident.split(":", 1)[0] for _, ident in identities(cfg)}
    masked = sorted({_user(e.id) for e in acl if _masked(e.id)})
    if not missing and any(user in my_users for user in masked):
        if gives_admin(cfg):
            # ZooKeeper masks digest ids only from a client without ADMIN: this identity lost the ADMIN the
            # configured ACL gives it, and an entry of its user name may hold another password.
            result.findings.append(
                Finding(
                    path,
                    "hidden",
                    "this identity lacks the ADMIN the configured ACL gives it, so ZooKeeper shows the digest ids "
                    f"without their password hash ({', '.join(u + ':x' for u in masked)}): an entry of user "
                    f"{', '.join(repr(u) for u in masked if u in my_users)} may be another password's",
                )
            )
        else:
            result.unproven.append(path)


def _made_under_another_key(acl: list[ACL], cfg: conf.AliasConfig) -> bool:
    """Whether a node whose ACL this alias could give (it has ADMIN there through one of its keys) is one zklocks
    made under another key of the project: every entry able to write is a derived identity (identity.USER), one
    of them this alias's, and the current key's ALL is missing or a key no longer configured is there besides."""
    if cfg.identity != "derived":
        return False
    mine = identities(cfg)
    writers = [e for e in acl if e.perms & ~Permissions.READ]
    if not writers or any(e.id.scheme != "digest" or _user(e.id) != USER or _masked(e.id) for e in writers):
        return False
    if not any((e.id.scheme, e.id.id) in mine and e.perms & Permissions.ADMIN for e in writers):
        return False
    return not _grants_current_key(acl, cfg) or any((e.id.scheme, e.id.id) not in mine for e in writers)


def _grants_current_key(acl: list[ACL], cfg: conf.AliasConfig) -> bool:
    """Whether ``acl`` gives the identity of the current SECRET_KEY (the first derived credential) ALL rights."""
    return _grants(acl).get(digest_id(cfg.auth[0][1]), 0) & Permissions.ALL == Permissions.ALL


def _remaining(deadline: float | None, cfg: conf.AliasConfig) -> float:
    if deadline is None:
        return cfg.connect_timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise ZkUnavailable(
            f"zklocks alias {cfg.alias!r}: the ACL check ran past CONNECT_TIMEOUT={cfg.connect_timeout:g}s"
        )
    return left


def _auth_error(cfg: conf.AliasConfig, exc: Exception) -> Exception:
    return translate(exc, cfg.alias, "show the ACLs", hint=f"Check AUTH and the ACL of {cfg.namespace}.")


def probe(session: Session) -> None:
    """Create and delete one ephemeral node in the namespace: proves CREATE and DELETE for this identity.
    ZkAuthError (naming the alias) if ZooKeeper refuses; nothing to do if the namespace does not exist yet."""
    cfg = session.cfg
    client = session.client
    # A leading "." never starts an encoded lock name, so the probe cannot meet a lock node.
    path = f"{cfg.namespace}/{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        client.create_async(path, b"", acl=session.acl, ephemeral=True).get(timeout=cfg.connect_timeout)
        client.delete_async(path).get(timeout=cfg.connect_timeout)
    except NoNodeError:
        return
    except (NoAuthError, AuthFailedError) as exc:
        raise translate(
            exc,
            cfg.alias,
            f"create and delete a node in {cfg.namespace}",
            hint="Check the AUTH credentials: ZooKeeper accepts any digest password at connect time.",
        ) from exc


def fix(session: Session, result: AuditResult) -> list[str]:
    """Give every node reported as weaker the expected ACL (needs ADMIN on it, which a weaker ACL usually
    grants). Returns the paths fixed."""
    expected = expected_acl(session.cfg)
    fixed = []
    for path in dict.fromkeys(f.path for f in result.fixable):  # a node may have more than one finding
        session.client.set_acls(path, expected)
        fixed.append(path)
    return fixed
