"""One cached accessor for ``settings.ZKLOCKS``.

``validate()`` is pure: it turns the raw setting into per-alias :class:`AliasConfig` objects plus a list of
problems, each with a stable check id. System checks report the problems; ``get_config()`` serves the
valid aliases; ``alias_config()`` raises a clear ZkConfigError for an alias that is unknown or invalid.
The cache is cleared on ``setting_changed`` (see ``apps.py``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from kazoo.client import KazooClient
from kazoo.security import ACL, make_digest_acl_credential

from . import lock_delay_option
from .exceptions import ZkConfigError
from .identity import derived_auth, project_keys

DEFAULT_ALIAS = "default"
# fmt: off
KNOWN_KEYS = frozenset({
    "HOSTS", "NAMESPACE", "SESSION_TIMEOUT", "CONNECT_TIMEOUT", "POOL_SIZE", "AUTH", "ACL", "OPTIONS", "READ_ACL",
    "REAP_INTERVAL", "TICK_TIME", "LAYOUT", "LOCK_DELAY", "READ_ONLY",
})
# fmt: on
# Node layouts (recipes/layout.py): "kazoo" (kazoo's Lock/ReadLock/WriteLock/Semaphore) or "curator" (Apache
# Curator's InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderLatch).
LAYOUT_NAMES = ("kazoo", "curator")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+)(:\d{1,5})?$")
_NAMESPACE = re.compile(r"^(/[A-Za-z0-9_.:\-]+)+$")
# OPTIONS are KazooClient keyword arguments, except those zklocks derives from the other settings.
RESERVED_OPTIONS = {
    "hosts": "HOSTS",
    "timeout": "SESSION_TIMEOUT",
    "auth_data": "AUTH",
    "default_acl": "ACL",
    "client_id": None,
}
KAZOO_OPTIONS = frozenset(
    name
    for name, p in inspect.signature(KazooClient.__init__).parameters.items()
    if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
) - set(RESERVED_OPTIONS)


@dataclass(frozen=True)
class AliasConfig:
    alias: str
    hosts: str
    namespace: str
    session_timeout: float = 10.0
    connect_timeout: float = 5.0
    pool_size: int = 1
    auth: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # credentials: never in a repr or a log
    acl: Any = None
    read_acl: str = "world"  # "world": anyone may read lock nodes; "auth": only the configured identity
    options: dict = field(default_factory=dict)
    reap_interval: float = 60.0
    tick_time: float | None = None  # the servers' tickTime in seconds, if known (shortens lease proofs)
    layout: str = "kazoo"  # whose recipes' node names and ordering to follow: "kazoo" or "curator"
    lock_delay: float = 0.0  # seconds nobody holds a lock after an unclean loss (docs/design.md §15)
    # Where ``auth`` comes from: "configured" (AUTH or ACL set), "derived" (from SECRET_KEY: identity.py) or
    # "open" (AUTH="open": ZooKeeper's open ACL, chosen on purpose).
    identity: str = "configured"
    # READ_ONLY: for inspection only (the admin, the health check, zklocks_status); it never takes a lock, and
    # its derived identity is the project's read-only one (identity.py).
    read_only: bool = False
    # The ids ("user:hash") granted READ, and nothing else, on the nodes the alias creates: the project's
    # read-only identity, for a derived identity under READ_ACL="auth".
    readers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Problem:
    id: str
    alias: str | None
    msg: str
    hint: str


def _problem(pid: str, alias: str | None, msg: str, hint: str) -> Problem:
    where = f"ZKLOCKS[{alias!r}]" if alias is not None else "ZKLOCKS"
    return Problem(pid, alias, f"{where}: {msg}", hint)


def _hosts(value: Any) -> tuple[str | None, str]:
    """The normalised HOSTS string, or None and what is wrong with ``value``."""
    if isinstance(value, (list, tuple)):
        wrong = sorted({type(h).__name__ for h in value if not isinstance(h, str)})
        if wrong:
            return None, f"must be a str or a list of str, not a list holding {', '.join(wrong)}"
        value = ",".join(h.strip() for h in value)
    if not isinstance(value, str):
        return None, f"must be a str or a list of str, not {type(value).__name__}"
    if not value.strip():
        return None, "is empty"
    parts = [p.strip() for p in value.split(",")]
    if not all(parts):
        return None, "an empty host between commas"
    for part in parts:
        if not _HOST.match(part):
            return None, f"{part!r} is not a host[:port]"
        port = part.rsplit(":", 1)[1] if ":" in part and not part.endswith("]") else None
        if port is not None and not 1 <= int(port) <= 65535:
            return None, f"port {port} of {part!r} is not between 1 and 65535"
    return ",".join(parts), ""


_LOOPBACK = re.compile(r"localhost|127\..*|\[::1\]|::1")


def servers(hosts: str, *, resolve: bool = False) -> frozenset[str]:
    """The servers of a HOSTS string as ZooKeeper is reached: case-blind, port 2181 when none, address literals in
    every form (``0x7f000001``, ``127.1`` and ``127.0.0.1`` are one loopback server). ``resolve``: host names too,
    through the resolver (``vm`` may be loopback); only where a lookup may take its time (``manage.py check``)."""
    out = set()
    for part in filter(None, (p.strip().lower() for p in hosts.split(","))):
        host, _, port = part.rpartition(":") if re.search(r":\d+$", part) else (part, "", "2181")
        out.add(_address(host, resolve) + ":" + port)
    return frozenset(out)


@functools.lru_cache(maxsize=256)
def _address(host: str, resolve: bool) -> str:
    """``host`` as an address: a literal (``inet_aton``'s forms included), else, with ``resolve``, the resolver's
    first answer; the name itself otherwise. Every loopback address is 127.0.0.1."""
    import ipaddress
    import socket

    bare = host.strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.inet_aton(bare))  # 0x7f000001, 2130706433, 127.1
        except OSError:
            if _LOOPBACK.fullmatch(host):
                return "127.0.0.1"
            if not resolve:
                return host
            try:
                address = ipaddress.ip_address(socket.getaddrinfo(bare, None)[0][4][0])
            except (OSError, ValueError, IndexError, UnicodeError):
                return host
    return "127.0.0.1" if address.is_loopback else str(address)


def inside(inner: str, outer: str) -> bool:
    """Whether namespace ``inner`` lies below namespace ``outer``."""
    return inner.startswith(outer.rstrip("/") + "/")


def nested(configs: dict[str, AliasConfig], *, resolve: bool = False) -> list[tuple[str, str]]:
    """(alias, outer alias) for each alias whose NAMESPACE lies inside another's on a server they share
    (zklocks.E042): each takes the other's nodes for its own, and their reapers delete them."""
    items = sorted(configs.items())
    return [
        (alias, other)
        for alias, cfg in items
        for other, ocfg in items
        if other != alias
        and inside(cfg.namespace, ocfg.namespace)
        and servers(cfg.hosts, resolve=resolve) & servers(ocfg.hosts, resolve=resolve)
    ]


def closest_hint(unknown: list[str], known: frozenset[str]) -> str:
    """``"SESION_TIMEOUT: did you mean SESSION_TIMEOUT? "`` for each unknown key close to a known one (case aside)."""
    import difflib

    out = ""
    for key in unknown:
        close = difflib.get_close_matches(key.upper(), sorted(known), n=1)
        if close:
            out += f"{key}: did you mean {close[0]}? "
    return out


def positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _validate_alias(
    alias: str, raw: Any, keys: tuple[str | bytes, ...] = ()
) -> tuple[AliasConfig | None, list[Problem]]:
    problems: list[Problem] = []
    if not isinstance(raw, dict):
        return None, [
            _problem("zklocks.E002", alias, "must be a dict of options.", 'Use e.g. {"HOSTS": "127.0.0.1:2181"}.')
        ]
    unknown = sorted(str(k) for k in set(raw) - KNOWN_KEYS)
    if unknown:
        problems.append(
            _problem(
                "zklocks.W001",
                alias,
                f"unknown option(s) {', '.join(unknown)}.",
                closest_hint(unknown, KNOWN_KEYS) + f"Known options: {', '.join(sorted(KNOWN_KEYS))}.",
            )
        )
    hosts, wrong = _hosts(raw.get("HOSTS"))
    if "HOSTS" not in raw or hosts is None:
        problems.append(
            _problem(
                "zklocks.E003",
                alias,
                "HOSTS is missing." if "HOSTS" not in raw else f"HOSTS {raw['HOSTS']!r}: {wrong}.",
                'Give "host:port[,host:port...]" or a list of "host:port" strings.',
            )
        )
    namespace = raw.get("NAMESPACE", "/zklocks")
    if (
        not isinstance(namespace, str)
        or not _NAMESPACE.match(namespace)
        or any(step in (".", "..", "zookeeper") for step in namespace.split("/")[1:2])
        or any(step in (".", "..") for step in namespace.split("/"))
    ):
        problems.append(
            _problem(
                "zklocks.E004",
                alias,
                f"NAMESPACE {namespace!r} is not a valid ZooKeeper path.",
                'Use an absolute path such as "/zklocks" (letters, digits, "-_.:", no trailing "/").',
            )
        )
    timeouts = {}
    for key, pid, default in (("SESSION_TIMEOUT", "zklocks.E005", 10.0), ("CONNECT_TIMEOUT", "zklocks.E006", 5.0)):
        value = raw.get(key, default)
        if not positive_number(value):
            problems.append(
                _problem(
                    pid, alias, f"{key} must be a positive number of seconds, not {value!r}.", f"For example {default}."
                )
            )
        timeouts[key] = value
    pool_size = raw.get("POOL_SIZE", 1)
    if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
        problems.append(
            _problem(
                "zklocks.E007",
                alias,
                f"POOL_SIZE must be an integer >= 1, not {pool_size!r}.",
                "Most processes need 1; raise it for many threads holding locks at once.",
            )
        )
    read_only = raw.get("READ_ONLY", False)
    if not isinstance(read_only, bool):
        problems.append(
            _problem(
                "zklocks.E022",
                alias,
                f"READ_ONLY must be True or False, not {read_only!r}.",
                "True: an alias for the admin, the health check and zklocks_status only, under a read-only identity.",
            )
        )
        read_only = False
    auth = raw.get("AUTH", ())
    identity = "configured"
    readers: tuple[str, ...] = ()
    if auth == "open":
        auth, identity = (), "open"
    elif "AUTH" not in raw and raw.get("ACL") is None:
        auth, identity = derived_auth(keys, reader=read_only), "derived"
        if not read_only:
            readers = tuple(make_digest_acl_credential(*c.split(":", 1)) for _, c in derived_auth(keys, reader=True))
        if not auth:
            problems.append(
                _problem(
                    "zklocks.E019",
                    alias,
                    "no AUTH, and no SECRET_KEY to derive the alias's identity from: its nodes would be open to "
                    "anyone who reaches a server.",
                    "Set SECRET_KEY (every process of the project needs the same one), give AUTH a credential, or "
                    'write AUTH="open" to choose ZooKeeper\'s open ACL on purpose.',
                )
            )
    if not isinstance(auth, (list, tuple)) or not all(
        isinstance(a, (list, tuple)) and len(a) == 2 and all(isinstance(x, str) for x in a) for a in auth
    ):
        problems.append(
            _problem(
                "zklocks.E008",
                alias,
                'AUTH must be a list of (scheme, credential) pairs, or "open".',
                'For example [("digest", "user:secret")]; leave it out for an identity derived from SECRET_KEY.',
            )
        )
        auth = ()
    elif any(scheme == "digest" and ":" not in cred for scheme, cred in auth):
        problems.append(
            _problem(
                "zklocks.E008",
                alias,
                "AUTH: a digest credential must be 'user:password'.",
                'For example [("digest", "user:secret")].',
            )
        )
    options = raw.get("OPTIONS", {})
    if not isinstance(options, dict):
        problems.append(
            _problem(
                "zklocks.E009",
                alias,
                "OPTIONS must be a dict of KazooClient keyword arguments.",
                'For example {"use_ssl": True, "ca": "/etc/zk/ca.pem"}.',
            )
        )
        options = {}
    unknown_options = sorted(str(k) for k in options if k not in KAZOO_OPTIONS and k not in RESERVED_OPTIONS)
    reserved = sorted(k for k in options if k in RESERVED_OPTIONS)
    if unknown_options:
        problems.append(
            _problem(
                "zklocks.E013",
                alias,
                f"OPTIONS {', '.join(unknown_options)}: not a KazooClient argument.",
                f"Accepted: {', '.join(sorted(KAZOO_OPTIONS))}.",
            )
        )
    if reserved:
        owners = ", ".join(sorted({owner for k in reserved if (owner := RESERVED_OPTIONS[k])}))
        problems.append(
            _problem(
                "zklocks.E013",
                alias,
                f"OPTIONS {', '.join(reserved)}: set by zklocks itself.",
                f"Use the alias's own settings instead ({owners})." if owners else "A session id cannot be shared.",
            )
        )
    tls_checks = ("verify_certs", "check_hostname")
    vague = [k for k in tls_checks if k in options and options[k] is not False and not options[k]]
    if options.get("use_ssl") and vague:
        problems.append(
            _problem(
                "zklocks.E061",
                alias,
                f"OPTIONS: TLS with {', '.join(f'{k}={options[k]!r}' for k in vague)}: a falsy value that is not "
                "False turns the check off without saying so.",
                "Leave it out (zklocks checks host names with use_ssl), or write False to turn it off on purpose "
                "(zklocks.W060 then warns).",
            )
        )
    if options.get("use_ssl") and (options.get("verify_certs") is False or options.get("check_hostname") is False):
        off = "verify_certs" if options.get("verify_certs") is False else "check_hostname"
        problems.append(
            _problem(
                "zklocks.W060",
                alias,
                f"OPTIONS: TLS with {off}=False: any server with a certificate from the same CA (or any at all) can "
                "pose as ZooKeeper and read the AUTH password.",
                "Leave verify_certs and check_hostname on (zklocks turns check_hostname on with use_ssl) and give "
                "the servers certificates that name their host names.",
            )
        )
    acl = raw.get("ACL")
    if acl is not None and not (isinstance(acl, (list, tuple)) and acl and all(isinstance(a, ACL) for a in acl)):
        problems.append(
            _problem(
                "zklocks.E014",
                alias,
                "ACL must be a non-empty list of kazoo.security.ACL.",
                'For example [make_digest_acl("user", "secret", all=True)]; or leave it out and set AUTH.',
            )
        )
    read_acl = raw.get("READ_ACL", "world")
    if read_acl not in ("world", "auth"):
        problems.append(
            _problem(
                "zklocks.E010",
                alias,
                f"READ_ACL must be 'world' or 'auth', not {read_acl!r}.",
                "'world' lets anyone read lock nodes (the admin of another project, monitoring).",
            )
        )
    reap = raw.get("REAP_INTERVAL", 60.0)
    if not (positive_number(reap) or reap == 0):
        problems.append(
            _problem(
                "zklocks.E011",
                alias,
                f"REAP_INTERVAL must be >= 0 seconds, not {reap!r}.",
                "0 turns the background sweep of empty lock nodes off.",
            )
        )
    tick_time = raw.get("TICK_TIME")
    session_timeout = timeouts["SESSION_TIMEOUT"]
    if tick_time is not None and not (
        positive_number(tick_time) and (not positive_number(session_timeout) or tick_time <= session_timeout / 2)
    ):
        problems.append(
            _problem(
                "zklocks.E016",
                alias,
                f"TICK_TIME must be a positive number of seconds, at most SESSION_TIMEOUT/2, not {tick_time!r}.",
                "Give the servers' tickTime from zoo.cfg in seconds (tickTime=2000 is 2.0), or "
                "leave it out: zklocks then assumes SESSION_TIMEOUT/2.",
            )
        )
    layout = raw.get("LAYOUT", "kazoo")
    if layout not in LAYOUT_NAMES:
        problems.append(
            _problem(
                "zklocks.E040",
                alias,
                f"LAYOUT must be one of {', '.join(map(repr, LAYOUT_NAMES))}, not {layout!r}.",
                "'kazoo' (the default) interoperates with kazoo's lock recipes, 'curator' with Apache Curator's.",
            )
        )
    lock_delay = raw.get("LOCK_DELAY", 0.0)
    problems.extend(
        _problem(pid, alias, msg, hint) for pid, msg, hint in lock_delay_option.problems(lock_delay, layout)
    )
    if any(p.id.startswith("zklocks.E") for p in problems):
        return None, problems
    return AliasConfig(
        alias=alias,
        hosts=hosts or "",
        namespace=namespace,
        session_timeout=float(timeouts["SESSION_TIMEOUT"]),
        connect_timeout=float(timeouts["CONNECT_TIMEOUT"]),
        pool_size=pool_size,
        auth=tuple((str(s), str(c)) for s, c in auth),
        acl=raw.get("ACL"),
        read_acl=read_acl,
        options=dict(options),
        reap_interval=float(reap),
        tick_time=float(tick_time) if tick_time is not None else None,
        layout=layout,
        lock_delay=float(lock_delay),
        identity=identity,
        read_only=read_only,
        readers=readers,
    ), problems


def validate(raw: Any, keys: tuple[str | bytes, ...] = ()) -> tuple[dict[str, AliasConfig], list[Problem]]:
    """Validate a whole ZKLOCKS value. Pure: no I/O, no Django state. ``keys``: the project's SECRET_KEY and its
    fallbacks (identity.project_keys), which aliases without AUTH derive their identity from."""
    if raw is None:
        return {}, [
            Problem(
                "zklocks.E001",
                None,
                "settings.ZKLOCKS is not set.",
                'Add ZKLOCKS = {"default": {"HOSTS": "127.0.0.1:2181"}} to your settings.',
            )
        ]
    if not isinstance(raw, dict):
        return {}, [
            Problem(
                "zklocks.E001",
                None,
                "settings.ZKLOCKS must be a dict of aliases.",
                'Add ZKLOCKS = {"default": {"HOSTS": "127.0.0.1:2181"}} to your settings.',
            )
        ]
    configs: dict[str, AliasConfig] = {}
    problems: list[Problem] = []
    if DEFAULT_ALIAS not in raw:
        problems.append(
            Problem(
                "zklocks.E001",
                DEFAULT_ALIAS,
                "settings.ZKLOCKS has no 'default' alias.",
                "Name one of your connections 'default'.",
            )
        )
    for alias, value in raw.items():
        if not isinstance(alias, str) or not alias:
            problems.append(
                Problem(
                    "zklocks.E002",
                    None,
                    f"alias {alias!r} must be a non-empty string.",
                    "Aliases are names like 'default' or 'reports'.",
                )
            )
            continue
        cfg, found = _validate_alias(alias, value, keys)
        problems.extend(found)
        if cfg is not None:
            configs[alias] = cfg
    problems.extend(_mixed_layouts(configs))
    return configs, problems


def _mixed_layouts(configs: dict[str, AliasConfig]) -> list[Problem]:
    """Aliases on one namespace of one ensemble must agree on the layout: nodes of two layouts on one lock node
    do not see each other, so their holders would not exclude each other."""
    problems, earlier = [], list(configs.values())
    for i, cfg in enumerate(earlier):
        shared = (o for o in earlier[:i] if o.namespace == cfg.namespace and servers(cfg.hosts) & servers(o.hosts))
        seen = next(shared, cfg)
        if seen.layout != cfg.layout:
            what = f"LAYOUT {cfg.layout!r} differs from alias {seen.alias!r}'s {seen.layout!r} on the same "
            what += f"HOSTS and NAMESPACE {cfg.namespace!r}: their locks would not exclude each other."
            hint = "Give every alias of one namespace the same LAYOUT, or give them different NAMESPACEs."
            problems.append(_problem("zklocks.E041", cfg.alias, what, hint))
    return problems


@functools.cache
def get_config() -> tuple[dict[str, AliasConfig], tuple[Problem, ...]]:
    _warn_unless_installed()
    configs, problems = validate(getattr(settings, "ZKLOCKS", None), project_keys(settings))
    return configs, tuple(problems)


def _warn_unless_installed() -> None:
    """zklocks used without "zklocks" in INSTALLED_APPS works, but silently without what its AppConfig.ready()
    wires: the system checks, the database checkpoint of on_lost="cancel", settings changes, the admin."""
    from django.apps import apps

    if apps.ready and not apps.is_installed("zklocks"):
        logging.getLogger("zklocks").warning(
            'zklocks: "zklocks" is not in INSTALLED_APPS: its system checks do not run, a database query does not '
            'stop a holder that lost its lock (on_lost="cancel"), and the admin page is missing. Add "zklocks" '
            "to INSTALLED_APPS."
        )


def alias_config(alias: str = DEFAULT_ALIAS) -> AliasConfig:
    configs, problems = get_config()
    try:
        return configs[alias]
    except KeyError:
        pass
    # settings.ZKLOCKS missing or not a dict (alias None), or without 'default': say so, not "unknown alias"
    for p in problems:
        if p.id == "zklocks.E001" and p.alias in (None, alias):
            raise ZkConfigError(f"{p.msg} {p.hint}")
    mine = [p.msg for p in problems if p.alias == alias and p.id.startswith("zklocks.E")]
    if mine:
        raise ZkConfigError("; ".join(mine))
    known = ", ".join(repr(a) for a in sorted(configs)) or "none"
    raise ZkConfigError(f"unknown zklocks alias {alias!r} (configured: {known})")


def refuse_read_only(cfg: AliasConfig, what: str) -> None:
    """Raise ZkConfigError when ``cfg`` is a READ_ONLY alias: ``what`` (a lock, a force-release) writes."""
    if cfg.read_only:
        raise ZkConfigError(
            f"zklocks alias {cfg.alias!r} is READ_ONLY: it inspects locks (the admin, the health check, "
            f"zklocks_status) and cannot {what}. Use an alias with the project's identity for that."
        )


def aliases() -> list[str]:
    return sorted(get_config()[0])


# (alias, where) recorded by decorators and task classes when they are defined, so that a typo in an alias is
# reported by `manage.py check` (zklocks.E012) instead of at the first call.
_declared_aliases: list[tuple[str, str]] = []


def declare_alias(alias: str, where: str) -> None:
    _declared_aliases.append((alias, where))


def alias_names() -> frozenset[str]:
    """Every alias named in settings.ZKLOCKS, valid or not (the configured ones if the setting is no dict)."""
    raw = getattr(settings, "ZKLOCKS", None)
    if isinstance(raw, dict):
        return frozenset(k for k in raw if isinstance(k, str))
    return frozenset(get_config()[0])


def declared_aliases() -> list[tuple[str, str]]:
    """Distinct (alias, where) pairs, in the order they were declared."""
    return list(dict.fromkeys(_declared_aliases))


def reset() -> None:
    get_config.cache_clear()
