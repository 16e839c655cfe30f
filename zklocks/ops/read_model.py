"""Read-only snapshot of every lock's holders and queue: the one reader the admin and the CLI use.

Reads are pipelined with kazoo's async API and batched with ZooKeeper's multiRead (``multiread.py``): every
request of a round is sent before any answer is awaited, so a namespace of thousands of nodes costs four
rounds of a few requests each, not thousands of round trips:

1. the namespace's children (the lock nodes);
2. each lock node's data (a semaphore marks itself there) and children;
3. each contender's and lease's data, each semaphore's internal mutex children, and the Celery policies' nodes
   that name a queued task (``__queued__``, ``__latest__``, ``__retry__``);
4. the data of the semaphores' mutex contenders (their waiters).

Nodes that vanish between rounds (a release, an expiry) are skipped. Answers are awaited with a bound that is
reset whenever one arrives: an alias whose server stops answering gives an error after CONNECT_TIMEOUT, and a
large namespace that answers steadily is never cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError

from ..client.multiread import CHILDREN, DATA, fetch
from ..names import MAX_NODE_LENGTH, decode_name, encode_name, shown, validate_name
from ..recipes import lock_delay, node_data
from ..recipes.kazoo_calls import translate
from ..recipes.layout import KAZOO, LATEST, QUEUED, RETRY, TASK_MARKERS, Kind, Layout, get, sequence_trusted
from ..recipes.semaphore import stored_max_leases
from .snapshots import REFUSED, AliasSnapshot, Contender, LockInfo, QueuedTask, Snapshot

KINDS = (Kind.EXCLUSIVE, Kind.SHARED, Kind.SEMAPHORE, Kind.ELECTION)


class NoAnswer(Exception):
    """ZooKeeper stopped answering in the middle of a snapshot."""


# -- reading one namespace (kazoo only, no Django) --


class _Results:
    """Waits for async results with a bound that restarts whenever an answer arrives."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.last = time.monotonic()

    def wait(self, result) -> Any:
        while True:
            remaining = self.last + self.patience - time.monotonic()
            if remaining <= 0:
                raise NoAnswer(f"ZooKeeper did not answer within {self.patience:g}s")
            if result.wait(min(remaining, 0.5)):
                break
        self.last = time.monotonic()
        return result.get_nowait()


# Node data may come from anyone (docs/security.md, "Hostile node data"): each field is taken only with the type
# and range a zklocks writes; any other value is dropped and the field named in Contender.invalid.
TEXT_LIMIT = 200  # characters kept of a text field (zklocks writes at most 120)
SKIPPED_LIMIT = 20  # lines about nodes not read, per alias
VISIT_CHUNK = 1000  # lock nodes read at a time by a pass that visits every lock (the health check's)
# Lock nodes above which a page reads only the locks it shows (admin, zklocks_status): 2,000 locks of 5 nodes are
# read in under 1 s within the readers' bounds (python -m benchmarks.readers_at_scale --locks 2000).
FULL_READ_LIMIT = 2000
SKIPPED_NAME = 60  # characters shown of a name not read
RAW_LIMIT = 300  # characters kept of foreign data shown verbatim
_INVALID = object()


def _int(value: Any) -> Any:
    """A pid, ident or owner number: an int of at most 64 bits, or a short string."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and -(2**64) < value < 2**64:
        return value
    if isinstance(value, str) and len(value) <= TEXT_LIMIT:
        return value
    return _INVALID


def _float(value: Any) -> Any:
    return None if value is None else _INVALID if (moment := node_data.timestamp(value)) is None else moment


def _str(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value if value is None or len(value) <= TEXT_LIMIT else value[:TEXT_LIMIT] + "…"
    return _INVALID


def _raw(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value if value is None or len(value) <= RAW_LIMIT else value[:RAW_LIMIT] + "…"
    return _INVALID


_FIELDS = (
    ("host", _str),
    ("pid", _int),
    ("thread", _str),
    ("task_id", _str),
    ("task_name", _str),
    ("queued_at", _float),
    ("acquired_at", _float),
    ("raw", _raw),
    ("ident", _int),
    ("owner", _int),
    ("asyncio_task", _str),
)


def _contender(child: str, mode: str, sequence: int, answer) -> Contender | None:
    if answer is None:
        return None  # gone since the listing
    raw, stat = answer
    data = node_data.parse(raw)
    created = stat.ctime / 1000.0
    fields: dict[str, Any] = {}
    invalid = []
    for name, take in _FIELDS:
        value = take(data.get(name))
        if value is _INVALID:
            invalid.append(name)
            value = None
        fields[name] = value
    fields["queued_at"] = fields["queued_at"] or created
    if mode == "lease":
        fields["acquired_at"] = created  # a lease node is created at the moment the lease is taken
    return Contender(
        node=child,
        mode=mode,
        sequence=sequence,
        token=stat.czxid,
        session_id=stat.ephemeralOwner,
        created_at=created,
        invalid=tuple(invalid),
        **fields,
    )


_POLICIES = {QUEUED: "unique_queued", LATEST: "debounce", RETRY: "keep_lock_on_retry"}


def _queued_task(marker: str, answer) -> QueuedTask | None:
    """The task a policy node names as queued; None if gone, running (its holder shows it) or not ours."""
    if answer is None:
        return None
    data = node_data.parse(answer[0])
    task_id, task_name = _str(data.get("task_id")), _str(data.get("task_name"))
    if not isinstance(task_id, str) or data.get("state") == "running":
        return None
    return QueuedTask(_POLICIES[marker], task_id, task_name if isinstance(task_name, str) else None)


def _max_leases(raw: bytes | None) -> int | None:
    """A semaphore marker's lease count; None for other data, and for a marker whose count is no sane number."""
    if not raw or len(raw) > node_data.MAX_PARSE or not node_data._shallow(raw.decode("utf-8", errors="replace")):
        return None
    try:
        value = stored_max_leases(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
        return value
    return None


def read_namespace(
    client,
    namespace: str,
    alias: str = "default",
    *,
    patience: float = 5.0,
    nodes: list[str] | None = None,
    layout: Layout = KAZOO,
    skipped: list[str] | None = None,
    visit: Callable[[list[LockInfo]], None] | None = None,
    names_only: bool = False,
) -> list[LockInfo]:
    """Every lock below ``namespace`` (or only the lock nodes in ``nodes``), sorted by name, read in the alias's
    node ``layout``. A node whose name is longer than any zklocks makes is not read: ``skipped`` gets a line
    for each (its path cut short). With ``visit``, the locks are read VISIT_CHUNK lock nodes at a time and
    handed to it, and none are returned: what a pass over every lock keeps at once stays bounded. With
    ``names_only``, one request: each lock node as a LockInfo with its name only (kind None, nobody in it).

    Raises NoAnswer if the server stops answering for ``patience`` seconds, NoAuthError if reads are refused.
    """
    results = _Results(patience)
    ns = namespace.rstrip("/")
    skipped = [] if skipped is None else skipped
    if nodes is None:
        try:
            nodes = results.wait(client.get_children_async(ns))
        except NoNodeError:
            return []
    nodes = _readable(ns, nodes, skipped)
    if names_only:
        named = [LockInfo(alias=alias, name=decode_name(n), node=n, path=f"{ns}/{n}", kind=None) for n in nodes]
        return sorted(named, key=lambda lock: lock.name)
    if visit is None:
        return _read_locks(client, ns, alias, nodes, layout, skipped, results)
    for start in range(0, len(nodes), VISIT_CHUNK):
        visit(_read_locks(client, ns, alias, nodes[start : start + VISIT_CHUNK], layout, skipped, results))
    return []


def _read_locks(
    client, ns: str, alias: str, nodes: list[str], layout: Layout, skipped: list[str], results: _Results
) -> list[LockInfo]:
    """The locks of the lock nodes ``nodes`` below ``ns``, sorted by name."""
    # Round 2: every lock node's data (a semaphore's marker) and children.
    refused: set[str] = set()  # paths of nodes this alias may not read
    ops: list[tuple[str, str]] = [op for node in nodes for op in ((DATA, f"{ns}/{node}"), (CHILDREN, f"{ns}/{node}"))]
    answers = fetch(client, ops, results.wait, node_data.MAX_PARSE, _refused(skipped, refused))
    found: list[tuple[LockInfo, list, list | None, bool, bool]] = []  # waiters None: split after round 3
    markers: dict[str, list[str]] = {}  # lock path: the task policies' nodes below it
    records: dict[str, tuple[str, float]] = {}  # lock path: an exclusive long hold's (child, acquired_at)
    for idx, node in enumerate(nodes):
        data, children = answers[2 * idx], answers[2 * idx + 1]
        if data is None or children is None:
            continue  # reaped since the listing
        children = _readable(f"{ns}/{node}", children, skipped)
        markers[f"{ns}/{node}"] = [m for m in TASK_MARKERS if m in children]
        record = node_data.parse_hold_record(data[0])
        if record is not None:
            records[f"{ns}/{node}"] = record
        max_leases = _max_leases(data[0])
        delay_until = lock_delay.until_ms(data[0], data[1].mtime)  # lock-delay: docs/design.md §15
        lock = LockInfo(
            alias=alias,
            name=decode_name(node),
            node=node,
            path=f"{ns}/{node}",
            kind=Kind.EXCLUSIVE,
            max_leases=max_leases,
            delay_until=None if delay_until is None else delay_until / 1000.0,
        )
        # A semaphore only Curator used has no marker of ours: its leases/ child tells.
        sub = layout.leases_child is not None and layout.leases_child in children
        if max_leases is not None or sub:
            lock.kind = Kind.SEMAPHORE
            held = [] if layout.leases_child else [(str(layout.sequence_of(c)), "", c) for c in layout.leases(children)]
            found.append((lock, held, [], layout.mutex in children, sub))
        else:
            # Split into holders and waiters once the contenders' tokens (czxids) are read: see _granted_order.
            found.append((lock, layout.sort_contenders(children), None, False, False))
    # Round 3: every holder's and waiter's data, the semaphores' internal mutex queues (and Curator's leases/).
    ops = []
    for lock, held, waiting, mutex, sub in found:
        ops.extend((DATA, f"{lock.path}/{child}") for _, _, child in held + (waiting or []))
        if mutex:
            ops.append((CHILDREN, layout.mutex_path(lock.path)))
        if sub:
            ops.append((CHILDREN, layout.leases_path(lock.path)))
        ops.extend((DATA, f"{lock.path}/{m}") for m in markers[lock.path])
    replies = iter(fetch(client, ops, results.wait, node_data.MAX_PARSE, _refused(skipped, refused)))
    later = []  # (list to fill, parent, mode, entries) for round 4
    for lock, held, waiting, mutex, sub in found:
        record = records.get(lock.path)
        if waiting is None:  # a plain lock's queue, in the recipe's order: split it now
            read = [(e, _contender(e[2], layout.mode(e[1]), int(e[0]), next(replies))) for e in held]
            contender = {entry[2]: c for entry, c in read if c is not None}
            order = _granted_order(layout, [(entry, c) for entry, c in read if c is not None])
            held, waiting = layout.split(order)
            _set_kind(lock, layout, order, held)
            for _, _, child in held:
                holder = contender[child]
                if record is not None and record[0] == child:  # a stale record names a past holder
                    holder = replace(holder, acquired_at=holder.acquired_at or record[1])
                lock.holders.append(holder)
            lock.waiters.extend(contender[child] for _, _, child in waiting)
        else:
            for target, entries in ((lock.holders, held), (lock.waiters, waiting)):
                for seq, marker, child in entries:
                    c = _contender(child, layout.mode(marker), int(seq), next(replies))
                    if c is not None:
                        target.append(c)
        if mutex:
            queue = _readable(layout.mutex_path(lock.path), next(replies) or [], skipped)
            order = layout.sort_contenders(queue, layout.exclusive)
            later.append((lock.waiters, layout.mutex_path(lock.path), Kind.EXCLUSIVE.value, order))
        if sub:
            leases = _readable(layout.leases_path(lock.path), next(replies) or [], skipped)
            taken = [(str(layout.sequence_of(c) or 0), "", c) for c in layout.leases(leases)]
            later.append((lock.holders, layout.leases_path(lock.path), "lease", taken))
        running = {h.task_id for h in lock.holders}
        for m in markers[lock.path]:
            queued = _queued_task(m, next(replies))
            if queued is not None and queued.task_id not in running:
                lock.queued_tasks.append(queued)
    # Round 4: who waits in a semaphore's mutex queue (each waits for a lease, in this order); Curator's leases.
    ops = [(DATA, f"{parent}/{child}") for _, parent, _, entries in later for _, _, child in entries]
    replies = iter(fetch(client, ops, results.wait, node_data.MAX_PARSE, _refused(skipped, refused)))
    for target, _, mode, entries in later:
        for seq, _, child in entries:
            c = _contender(child, mode, int(seq), next(replies))
            if c is not None:
                target.append(c)
    # A lock with a node we may not read is left out whole (it is named among the skipped): shown without it, the
    # first readable waiter would pass for its holder, and a force-release would delete that waiter's node.
    out = [entry[0] for entry in found if not any(p == entry[0].path or p.startswith(entry[0].path + "/")
                                                  for p in refused)]  # fmt: skip
    out.sort(key=lambda lock: lock.name)
    return out


def _granted_order(layout: Layout, read: list[tuple[tuple[str, str, str], Contender]]) -> list[tuple[str, str, str]]:
    """The queue of a lock (``read``: each contender entry with its node, in the recipe's order by suffix text), as
    the holders were granted: in each of the layout's queues, the head is the first node in the recipe's order
    that no older node (lower czxid) sorts ahead of and whose suffix ZooKeeper can have given (else the first
    such node of any suffix); the rest follow in the recipe's order, suffixes past the sequence limit last.

    The recipe grants a node once nothing sorts ahead of it. A node past the sequence limit (docs/design.md §13)
    or forged with a negative suffix sorts first: made after the holder, it takes nothing from it; made before a
    waiter, it is what that waiter waits for, and the admin and zklocks_release name and free it, never the
    waiter behind it. A node forged with an ordinary suffix lower than the holder's, after the grant, cannot be
    told from a holder by a reader (docs/security.md)."""
    out: list[tuple[str, str, str]] = []
    for markers in layout.queues:
        queue = [(entry, c) for entry, c in read if entry[1] in markers]
        if not queue:
            continue
        candidates, oldest = [], None
        for entry, c in queue:
            if oldest is None or c.token < oldest:  # no node ahead of it is older: it may have been granted
                candidates.append(entry)
                oldest = c.token
        head = next((entry for entry in candidates if sequence_trusted(int(entry[0]))), candidates[0])
        rest = [entry for entry, _ in queue if entry is not head]
        rest.sort(key=lambda entry: not sequence_trusted(int(entry[0])))
        out += [head, *rest]
    return out


def _set_kind(lock: LockInfo, layout: Layout, order: list, held: list) -> None:
    if any(marker == layout.latch for _, marker, _ in order):
        lock.kind = Kind.ELECTION  # holders: the leader; waiters: the standby candidates, in order
    else:
        # The holders' mode is the lock's kind: a queue of readers behind a writer is held exclusively.
        lock.kind = None if not held else Kind.EXCLUSIVE if layout.is_exclusive(held[0][1]) else Kind.SHARED


def _refused(skipped: list[str], refused: set[str]) -> Callable[[str], None]:
    """Notes a node this alias may not read (NoAuth) in ``refused``, and a line in ``skipped``: anyone who may
    create in the namespace can make such a node, and it must not blank the alias. Such lines have a quota of
    their own: a reader that counts them (zklocks_check, the health check) must see one."""

    def note(path: str) -> None:
        refused.add(path)
        if sum(1 for line in skipped if line.endswith(REFUSED)) < SKIPPED_LIMIT:
            skipped.append(f"{shown(path[-SKIPPED_NAME * 2 :])}: {REFUSED}")

    return note


def _readable(parent: str, names: list[str], skipped: list[str]) -> list[str]:
    """``names`` without those longer than any node name zklocks makes (names.MAX_NODE_LENGTH): a hostile
    client's, which would only make every request that names them large. Each one left out is noted."""
    kept = [n for n in names if len(n) <= MAX_NODE_LENGTH]
    if len(kept) < len(names):
        for name in names:
            if len(name) > MAX_NODE_LENGTH and len(skipped) < SKIPPED_LIMIT:
                skipped.append(
                    f"{shown(parent + '/' + name[:SKIPPED_NAME])}…: a name of {len(name)} characters, longer than "
                    f"any zklocks makes ({MAX_NODE_LENGTH}): not read"
                )
    return kept


# -- Django side: every configured alias --


def _scrub(message: str, cfg) -> str:
    """Never show a credential, whatever an error message carries."""
    for _scheme, credential in getattr(cfg, "auth", ()) or ():
        if credential:
            message = message.replace(credential, "***")
            secret = credential.split(":", 1)[-1]
            if secret:
                message = message.replace(secret, "***")
    return message


def read_alias(
    alias: str,
    nodes: list[str] | None = None,
    connected: threading.Event | None = None,
    visit: Callable[[list[LockInfo]], None] | None = None,
    names_only: bool = False,
) -> AliasSnapshot:
    """One alias's locks (or only the lock nodes ``nodes``); problems become ``error``, never an exception.

    ``connected`` is set once a session is at hand (or the attempt is over). ``visit`` and ``names_only``: as
    read_namespace's."""
    from ..client.pools import connections
    from ..exceptions import ZkLocksError

    started = time.monotonic()
    cfg = None
    try:
        pool = connections[alias]
        cfg = pool.cfg
        snap = AliasSnapshot(alias=alias, namespace=cfg.namespace)
        session = pool.session()
        if connected is not None:
            connected.set()
        snap.locks = read_namespace(
            session.client,
            cfg.namespace,
            alias,
            patience=cfg.connect_timeout,
            nodes=nodes,
            layout=get(cfg.layout),
            skipped=snap.skipped,
            visit=visit,
            names_only=names_only,
        )
    except NoAuthError as exc:
        snap = AliasSnapshot(alias=alias, namespace=cfg.namespace if cfg else "")
        snap.error = str(
            translate(
                exc,
                alias,
                f"list {cfg.namespace if cfg else 'the namespace'}",
                hint="Check the alias's AUTH and READ_ACL.",
            )
        )
    except NoAnswer as exc:
        snap = AliasSnapshot(alias=alias, namespace=cfg.namespace if cfg else "")
        snap.error = f"alias {alias!r}: {exc}"
    except ZkLocksError as exc:
        snap = AliasSnapshot(alias=alias, namespace=cfg.namespace if cfg else "")
        text = str(exc)
        snap.error = text if repr(alias) in text else f"alias {alias!r}: {text}"
    except Exception as exc:  # noqa: BLE001 a snapshot reports, it never fails the page or the command
        snap = AliasSnapshot(alias=alias, namespace=cfg.namespace if cfg else "")
        snap.error = f"alias {alias!r}: {type(exc).__name__}: {exc}"
    if snap.error:
        snap.error = _scrub(snap.error, cfg)
    snap.seconds = time.monotonic() - started
    return snap


def _read_all(
    wanted: list[tuple[str, list[str] | None]],
    visit: Callable[[list[LockInfo]], None] | None = None,
    names_only: bool = False,
) -> list[AliasSnapshot]:
    """Read aliases in parallel. Getting a session is bounded by the alias's CONNECT_TIMEOUT even when another
    thread is already starting one; the reads themselves are bounded by answers arriving (``_Results``).
    ``visit`` (as read_namespace's) is called from those threads, one call at a time."""
    from .. import conf

    found: dict[int, AliasSnapshot] = {}
    running = []
    serial = None
    if visit is not None:
        one_at_a_time, each = threading.Lock(), visit

        def serial(locks: list[LockInfo]) -> None:
            with one_at_a_time:
                each(locks)

    for idx, (alias, nodes) in enumerate(wanted):
        connected = threading.Event()

        def run(idx=idx, alias=alias, nodes=nodes, connected=connected) -> None:
            try:
                found[idx] = read_alias(alias, nodes, connected, serial, names_only)
            finally:
                connected.set()

        t = threading.Thread(target=run, name=f"zklocks-inspect-{alias}", daemon=True)
        t.start()
        running.append((idx, alias, t, connected, time.monotonic()))
    for idx, alias, t, connected, started in running:
        try:
            limit = conf.alias_config(alias).connect_timeout
        except Exception:  # noqa: BLE001 a bad alias: read_alias reports it at once
            limit = 0.0  # unknown or invalid alias: read_alias reports it at once
        if not connected.wait(max(0.0, started + limit + 0.5 - time.monotonic())):
            found[idx] = AliasSnapshot(
                alias=alias,
                namespace="",
                error=(f"alias {alias!r}: no ZooKeeper session within CONNECT_TIMEOUT={limit:g}s"),
                seconds=limit,
            )
            continue
        t.join()
    return [found[idx] for idx in range(len(wanted))]


def snapshot(aliases: list[str] | None = None) -> Snapshot:
    """All locks of every configured alias (or of ``aliases``), read in parallel: an unreachable alias costs
    its own CONNECT_TIMEOUT, not the sum of them."""
    from .. import conf

    wanted = list(conf.aliases() if aliases is None else aliases)
    taken_at = time.time()
    return Snapshot(taken_at=taken_at, aliases=_read_all([(alias, None) for alias in wanted]))


def distinct_aliases(aliases: list[str]) -> list[str]:
    """``aliases`` less each READ_ONLY one that reads a namespace a writable alias of the list reads too (the
    same servers, in any address form, and the same NAMESPACE): its locks are shown once, under the alias that
    may release them. An alias whose settings are invalid stays, for its error to be seen."""
    from .. import conf

    configs = conf.get_config()[0]

    def place(alias: str) -> tuple[frozenset[str], str]:
        return conf.servers(configs[alias].hosts), configs[alias].namespace

    valid = [a for a in aliases if a in configs]
    writable = {place(a) for a in valid if not configs[a].read_only}
    return [a for a in aliases if a not in configs or not configs[a].read_only or place(a) not in writable]


def listing(aliases: list[str]) -> Snapshot:
    """The lock nodes of ``aliases`` by name only (one request per alias): what a page reads before it reads
    the locks it shows, where a namespace holds too many to read them all (FULL_READ_LIMIT)."""
    return Snapshot(taken_at=time.time(), aliases=_read_all([(alias, None) for alias in aliases], names_only=True))


def read_locks(wanted: list[LockInfo], listed: Snapshot) -> Snapshot:
    """The locks of ``wanted`` (some of ``listed``, a ``listing``) read in full, in their order, those gone since
    left out; each alias of ``listed`` keeps its listing's error and skipped nodes."""
    by_alias: dict[str, list[str]] = {}
    for lock in wanted:
        by_alias.setdefault(lock.alias, []).append(lock.node)
    read = {a.alias: a for a in _read_all(list(by_alias.items()))}
    found = {(lock.alias, lock.node): lock for a in read.values() for lock in a.locks}
    aliases = []
    for a in listed.aliases:
        r = read.get(a.alias) or AliasSnapshot(alias=a.alias, namespace=a.namespace)
        mine = [
            found[(a.alias, lock.node)] for lock in wanted if lock.alias == a.alias and (a.alias, lock.node) in found
        ]
        aliases.append(
            AliasSnapshot(
                alias=a.alias,
                namespace=a.namespace,
                locks=mine,
                error=a.error or r.error,
                seconds=a.seconds + r.seconds,
                skipped=a.skipped + r.skipped,
            )
        )
    return Snapshot(taken_at=time.time(), aliases=aliases)


def visit_locks(aliases: list[str], visit: Callable[[list[LockInfo]], None]) -> list[AliasSnapshot]:
    """Hand every lock of ``aliases`` to ``visit``, a chunk at a time (bounded memory, whatever the namespace
    holds); each alias's snapshot carries its error and its skipped nodes, and no locks."""
    return _read_all([(alias, None) for alias in aliases], visit)


def lock_info(alias: str, name: str | None = None, *, node: str | None = None) -> tuple[LockInfo | None, str | None]:
    """One lock, by name or by lock node name (None if it has no node), and the alias's error, if any."""
    if node is None:
        node = encode_name(validate_name(name))
    (snap,) = _read_all([(alias, [node])])
    if snap.error:
        return None, snap.error
    return (snap.locks[0] if snap.locks else None), None
