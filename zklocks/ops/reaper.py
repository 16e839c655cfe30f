"""Reaping of empty lock nodes, off the hot path: a background sweep per pool and ``manage.py zklocks_reap``. See
docs/operations.md, "Empty lock nodes"; the delete and re-create race, and :func:`recycle` for nodes near sequence
exhaustion: docs/design.md §2 and §13 (tokens are czxids, so a re-created node never resets them: §11).

The background sweep deletes only nodes whose ``pzxid`` (and their internal children's) did not change since the
previous sweep. A contender that comes and goes between the sweep's read of the node and its delete is the
exception: the delete checks only the node's data version.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from .. import forking
from ..client import pools
from ..client.session import Session
from ..conf import AliasConfig
from ..recipes import layout, lock_delay
from ..recipes.layout import INTERNAL_CHILDREN, SEQUENCE_WARN

log = logging.getLogger("zklocks")


def sequence_used(stat) -> int:
    """How many children were ever created below a node: the counter its next sequential child is named after.

    ZooKeeper shows ``2 * creates - numChildren`` as the cversion, as a signed 32-bit int."""
    return ((stat.cversion + stat.numChildren) % 2**32) // 2


def sweep(
    client,
    namespace: str,
    worn: list[tuple[str, int]] | None = None,
    internal: tuple[str, ...] = INTERNAL_CHILDREN,
    idle: dict[str, tuple[int, ...]] | None = None,
) -> int:
    """Delete empty lock nodes (and their empty ``internal`` children: the alias layout's) below ``namespace``;
    return how many went.

    Lock nodes in use that are near the end of their sequence numbers are logged, and added to ``worn`` as
    ``(name, used)``. With ``idle`` (the background sweeper's memory, kept between its sweeps), only nodes whose
    children have not changed since the previous sweep are deleted."""
    try:
        names = client.get_children(namespace)
    except NoNodeError:
        return 0
    removed = 0
    seen: dict[str, tuple[int, ...]] = {}
    stats = [(name, client.exists_async(f"{namespace}/{name}")) for name in names]
    for name, result in stats:
        path = f"{namespace}/{name}"
        try:
            stat = result.get(timeout=10)
        except NoNodeError:
            continue
        if stat is None or stat.ephemeralOwner:
            continue  # an ephemeral node is someone's contender (another alias's, nested here), never a lock node
        if stat.numChildren and sequence_used(stat) >= SEQUENCE_WARN:
            log.warning(
                "zklocks: lock node %s has used %d of its 2147483647 sequence numbers; it is recycled when "
                "next empty (manage.py zklocks_reap --recycle)",
                path,
                sequence_used(stat),
            )
            if worn is not None:
                worn.append((name, sequence_used(stat)))
        if idle is not None:
            mark = seen[name] = _activity(client, path, stat, internal)
            if idle.get(name) != mark:
                continue  # used since the previous sweep (or new): looked at again at the next one
        if stat.numChildren:
            for child in internal:
                _delete_if_empty(client, f"{path}/{child}")
            stat = client.exists(path)
            if stat is None or stat.numChildren:
                continue
        if stat.dataLength and lock_delay.shut_after_reaping(client, path):
            continue  # a lock-delay in force, or a guard whose holder left without releasing (design.md §15)
        removed += _delete_if_empty(client, path, stat.version)
    if idle is not None:
        idle.clear()
        idle.update(seen)
    return removed


def _activity(client, path: str, stat, internal: tuple[str, ...]) -> tuple[int, ...]:
    """What changes whenever a contender comes or goes: the pzxid of the lock node and of its internal children
    (a semaphore's contenders live there)."""
    marks = [stat.pzxid]
    if stat.numChildren:
        for child in internal:
            child_stat = client.exists(f"{path}/{child}")
            marks.append(child_stat.pzxid if child_stat is not None else 0)
    return tuple(marks)


def recycle(client, path: str, wait: float, internal: tuple[str, ...] = INTERNAL_CHILDREN) -> bool:
    """Delete the lock node ``path`` at its next empty moment, within ``wait`` seconds; True once it is gone.

    The next contender re-creates it with a fresh sequence counter. ZooKeeper refuses the delete while any
    child is left, so no holder or waiter is ever removed with it.
    """
    deadline = time.monotonic() + wait
    while True:
        changed = threading.Event()
        try:
            children = client.get_children(path, watch=lambda _event, changed=changed: changed.set())
        except NoNodeError:
            return True
        for child in internal:
            if child in children:
                _delete_if_empty(client, f"{path}/{child}")
        if _delete_if_empty(client, path) or client.exists(path) is None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        changed.wait(min(remaining, 0.2))  # a semaphore's mutex queue changes without waking this watch


def _delete_if_empty(client, path: str, version: int = -1) -> int:
    """Delete ``path`` if it is a persistent node without children (at ``version``, if given); 1 if it went. An
    ephemeral node is a contender's, whatever its name: never deleted (the version pins what was looked at)."""
    try:
        stat = client.exists(path)
        if stat is None or stat.ephemeralOwner or (version != -1 and stat.version != version):
            return 0
        client.delete(path, version=stat.version)
        return 1
    except (NoNodeError, NotEmptyError, BadVersionError):
        return 0


def internal_children(cfg: AliasConfig) -> tuple[str, ...]:
    """The internal children of a lock node in the alias's layout (a semaphore's mutex queue and leases)."""
    return layout.get(cfg.layout).internal_children


_started: set[int] = set()
_started_lock = threading.Lock()
_installed = False  # the hook survives a fork: the child's pools call it too


def reset_after_fork() -> None:
    global _started_lock
    _started.clear()
    _started_lock = threading.Lock()


forking.register(reset_after_fork)


class Pool(Protocol):
    """What the sweeper needs of a connection pool (connections.Pool)."""

    cfg: AliasConfig
    closed: bool

    def sessions(self) -> list[Session]: ...


def install() -> None:
    """Start each pool's sweeper with its first session; the app calls this when it is ready."""
    global _installed
    if not _installed:
        _installed = True
        pools.on_session_started(schedule)


def schedule(pool: Pool) -> None:
    """Start the pool's sweeper thread once (REAP_INTERVAL=0 disables it; a READ_ONLY alias deletes nothing)."""
    interval = pool.cfg.reap_interval
    if not interval or pool.cfg.read_only:
        return
    with _started_lock:
        if id(pool) in _started:
            return
        _started.add(id(pool))
    thread = threading.Thread(target=_loop, args=(pool, interval), name=f"zklocks-reaper-{pool.cfg.alias}", daemon=True)
    try:
        thread.start()
    except BaseException:
        if not thread.is_alive():  # none started (none left, or a signal handler's exception): the next session
            with _started_lock:  # of the pool tries again
                _started.discard(id(pool))
        raise


def _loop(pool: Pool, interval: float) -> None:
    idle: dict[str, tuple[int, ...]] = {}  # each lock node's activity at the previous sweep
    while not pool.closed:
        time.sleep(interval)
        if pool.closed:
            return
        for session in pool.sessions():
            if session.connected:
                try:
                    sweep(session.client, pool.cfg.namespace, internal=internal_children(pool.cfg), idle=idle)
                except Exception:
                    log.debug("zklocks: sweep of %r failed", pool.cfg.alias, exc_info=True)
                break
