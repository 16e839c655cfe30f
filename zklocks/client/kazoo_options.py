"""What a session passes to KazooClient besides the hosts: the ACL of the nodes zklocks creates, and the TLS
defaults."""

from __future__ import annotations

from kazoo.security import ACL, Id, Permissions, make_digest_acl, make_digest_acl_credential

from .. import conf


def build_acl(cfg: conf.AliasConfig) -> list | None:
    """The ACL for every node zklocks creates: CREATE/DELETE/WRITE/ADMIN only for the configured identity."""
    if cfg.acl is not None:
        return list(cfg.acl)
    digests = [cred for scheme, cred in cfg.auth if scheme == "digest" and ":" in cred]
    if not digests:
        return None  # no identity configured: ZooKeeper's open ACL
    acl = [make_digest_acl(*cred.split(":", 1), all=True) for cred in digests]
    if cfg.read_acl == "world":
        acl.append(ACL(Permissions.READ, Id("world", "anyone")))
    else:  # READ_ACL="auth": the project's read-only identity reads too (a READ_ONLY alias)
        acl.extend(ACL(Permissions.READ, Id("digest", reader)) for reader in cfg.readers)
    return acl


def digest_id(credential: str) -> tuple[str, str]:
    """The (scheme, id) pair a digest credential ("user:password") is known by in ACLs."""
    return ("digest", make_digest_acl_credential(*credential.split(":", 1)))


def identities(cfg: conf.AliasConfig) -> set[tuple[str, str]]:
    """The (scheme, id) pairs the alias's AUTH makes it: one per digest credential."""
    return {digest_id(cred) for scheme, cred in cfg.auth if scheme == "digest" and ":" in cred}


def outside_writers(acl: list | None, cfg: conf.AliasConfig) -> list[str]:
    """The entries of ``acl`` that let someone other than the alias's own identities write, delete or change the
    ACL, as "scheme:id" ("world:anyone" for ZooKeeper's open ACL). An ``ip:`` range, ``world`` and a digest that
    is not one of AUTH's are others; ``auth`` (the creator's own ids) and an id of another scheme the alias
    authenticates with (x509, sasl: the server names it) count as the alias's."""
    if not acl:
        return ["world:anyone"]
    own = identities(cfg)
    own_schemes = {scheme for scheme, _ in cfg.auth if scheme != "digest"}
    guard = Permissions.WRITE | Permissions.DELETE | Permissions.ADMIN  # ADMIN can grant itself the others
    others = []
    for entry in acl:
        scheme, ident = entry.id.scheme, entry.id.id
        if not entry.perms & guard or scheme == "auth" or scheme in own_schemes or (scheme, ident) in own:
            continue
        others.append(f"{scheme}:{ident}")
    return others


def writes_guarded(acl: list | None, cfg: conf.AliasConfig) -> bool:
    """Whether the nodes zklocks creates with ``acl`` refuse writes and deletes by anyone but the alias's own
    identities: then a contender's node changes only by its owner's hand (docs/security.md)."""
    return not outside_writers(acl, cfg)


def tls_defaults(options: dict) -> dict:
    """With ``use_ssl``, the server's certificate must name the host we asked for (``check_hostname``) unless the
    alias says otherwise: kazoo leaves it off, and any server holding a certificate from the same CA could then
    pose as ZooKeeper and read the AUTH password. (zklocks.W060 warns when an alias turns it off.)"""
    if options.get("use_ssl") and options.get("verify_certs", True) is not False:
        options.setdefault("check_hostname", True)
    return options
