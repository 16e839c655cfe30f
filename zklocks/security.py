"""ACL audit of an alias's namespace: weaker ACLs than configured, and an identity that lacks its rights.

ZooKeeper checks CREATE and DELETE on the *parent*, so the namespace and every lock node must grant CREATE,
DELETE, WRITE and ADMIN only to the configured identity (``session.build_acl``). Nodes keep the ACL they
were created with: a namespace made before AUTH was configured stays open to anyone, and one made with another
password locks this alias out (ZooKeeper accepts any digest password at connect time and answers NoAuth later).

``audit()`` reads ACLs only; ``probe()`` also creates and deletes one ephemeral node. Both are used by
``manage.py zklocks_check`` and by the deploy system check (zklocks.E015, W002, W003).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kazoo.exceptions import AuthFailedError, NoAuthError, NoNodeError
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from . import conf
from .exceptions import ZkUnavailable
from .recipes import layout
from .recipes.calls import translate
from .session import Session, build_acl

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
DEFAULT_LIMIT = 1000


def perm_names(perms: int) -> str:
    return ", ".join(name for name, bit in PERMISSIONS if perms & bit) or "nothing"


def identities(cfg: conf.AliasConfig) -> set[tuple[str, str]]:
    """The (scheme, id) pairs the alias's AUTH makes it: one per digest credential."""
    out = set()
    for scheme, cred in cfg.auth:
        if scheme == "digest" and ":" in cred:
            out.add(("digest", make_digest_acl_credential(*cred.split(":", 1))))
    return out


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


def extra_grants(actual: list[ACL], expected: list[ACL]) -> list[str]:
    """Rights the node grants beyond the expected ACL, e.g. ["world:anyone may WRITE, CREATE, DELETE, ADMIN"].
    A masked digest id ("user:x") can only be told apart by its user name."""
    allowed = _grants(expected)
    allowed_by_user = _grants(expected, by_user=True)
    out = []
    for (scheme, ident), perms in sorted(_grants(actual).items()):
        if _masked(Id(scheme, ident)):
            extra = perms & ~allowed_by_user.get((scheme, ident.split(":", 1)[0]), 0)
        else:
            extra = perms & ~allowed.get((scheme, ident), 0)
        if extra:
            out.append(f"{scheme}:{_shown(scheme, ident)} may {perm_names(extra)}")
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
    kind: str  # "weaker" | "no-access"
    detail: str


@dataclass
class AuditResult:
    alias: str
    namespace: str
    exists: bool = False
    checked: int = 0
    truncated: bool = False
    open_by_config: bool = False  # no AUTH/ACL: nodes are open to anyone by the settings' choice
    findings: list[Finding] = field(default_factory=list)

    @property
    def weaker(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "weaker"]

    @property
    def no_access(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "no-access"]


def connect(cfg: conf.AliasConfig) -> Session:
    """A short-lived session of the alias (same client options as the lock pool); ZkUnavailable within
    CONNECT_TIMEOUT."""
    session = Session(cfg)
    session.start()
    return session


def audit(session: Session, limit: int | None = DEFAULT_LIMIT, deadline: float | None = None) -> AuditResult:
    """Compare the ACLs of the namespace, of its lock nodes and of their semaphore mutexes with the expected
    ACL. Reads only. ZkAuthError if ZooKeeper refuses to show them; ZkUnavailable past ``deadline``."""
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
    except NoNodeError:
        return result  # created with the expected ACL on first use
    except (NoAuthError, AuthFailedError) as exc:
        raise _auth_error(cfg, exc) from exc
    result.exists = True
    _judge(result, cfg.namespace, acl, expected, cfg)
    try:
        children = sorted(client.get_children_async(cfg.namespace).get(timeout=_remaining(deadline, cfg)))
    except NoAuthError as exc:
        raise _auth_error(cfg, exc) from exc
    if limit is not None and len(children) > limit:
        children, result.truncated = children[:limit], True
    paths = [f"{cfg.namespace}/{c}" for c in children]
    paths += [f"{p}/{internal}" for p in paths for internal in layout.get(cfg.layout).internal_children]
    pending = [(p, client.get_acls_async(p)) for p in paths]  # pipelined: one round trip for all
    for path, answer in pending:
        try:
            acl, _ = answer.get(timeout=_remaining(deadline, cfg))
        except NoNodeError:
            continue  # released meanwhile, or not a semaphore
        except NoAuthError as exc:
            raise _auth_error(cfg, exc) from exc
        _judge(result, path, acl, expected, cfg)
    return result


def _judge(result: AuditResult, path: str, acl: list[ACL], expected: list[ACL], cfg: conf.AliasConfig) -> None:
    result.checked += 1
    if result.open_by_config:
        return
    extra = extra_grants(acl, expected)
    if extra:
        result.findings.append(Finding(path, "weaker", "; ".join(extra)))
    missing = missing_rights(acl, cfg)
    if missing:
        result.findings.append(Finding(path, "no-access", f"the configured identity may not {perm_names(missing)}"))


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
    path = f"{cfg.namespace}/.zklocks-check-{uuid.uuid4().hex}"
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
    for finding in result.weaker:
        session.client.set_acls(finding.path, expected)
        fixed.append(finding.path)
    return fixed
