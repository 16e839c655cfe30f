"""What a session passes to KazooClient besides the hosts: the ACL of the nodes zklocks creates, and the TLS
defaults."""

from __future__ import annotations

from kazoo.security import ACL, Id, Permissions, make_digest_acl

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
    return acl


def writes_guarded(acl: list | None) -> bool:
    """Whether the nodes zklocks creates with ``acl`` refuse writes and deletes by anyone but the configured
    identities: then a contender's node changes only by its owner's hand (docs/security.md)."""
    if not acl:
        return False
    guard = Permissions.WRITE | Permissions.DELETE
    return not any(entry.id.scheme == "world" and entry.perms & guard for entry in acl)


def tls_defaults(options: dict) -> dict:
    """With ``use_ssl``, the server's certificate must name the host we asked for (``check_hostname``) unless the
    alias says otherwise: kazoo leaves it off, and any server holding a certificate from the same CA could then
    pose as ZooKeeper and read the AUTH password. (zklocks.W060 warns when an alias turns it off.)"""
    if options.get("use_ssl") and options.get("verify_certs", True) is not False:
        options.setdefault("check_hostname", True)
    return options
