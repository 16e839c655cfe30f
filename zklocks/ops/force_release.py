"""Force-release: delete a lock holder's node, for the admin and ``manage.py zklocks_release``.

This does not stop a live holder. Its handle learns of the loss through ``ensure_held()`` (one read), and the
next holder's higher fencing token lets a fenced resource refuse the old holder's late writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from .. import conf
from ..client.pools import connections
from ..exceptions import ZkLocksError
from ..recipes.kazoo_calls import translate
from .read_model import lock_info
from .snapshots import Contender, LockInfo


@dataclass
class Released:
    lock: LockInfo
    deleted: list[Contender] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # asked for, but no longer holders


def force_release(alias: str, node: str, holders: Mapping[str, int] | None = None) -> Released:
    """Delete holder nodes of the lock node ``node``.

    ``holders`` maps the child node names to delete to the czxid (token) they were seen with: only those that
    still hold with that very czxid are deleted, the others are reported in ``gone``. ``None`` deletes every
    current holder, whoever it is now.

    Raises ZkLocksError when the alias cannot be read or written, LookupError when the lock has no node.
    """
    pool = connections[alias]
    conf.refuse_read_only(pool.cfg, "release a lock by force")
    info, error = lock_info(alias, node=node)
    if error:
        raise ZkLocksError(error)
    if info is None:
        raise LookupError(f"alias {alias!r} has no lock node {node!r}")
    targets = info.holders if holders is None else [h for h in info.holders if holders.get(h.node) == h.token]
    result = Released(lock=info, gone=[n for n in (holders or []) if n not in {h.node for h in targets}])
    client = pool.session().client
    for contender in targets:
        # Child names carry a fresh guid per acquire: this path can only ever be this holder's node.
        try:
            client.delete_async(f"{info.path}/{contender.node}").get(timeout=pool.cfg.connect_timeout)
        except NoNodeError:
            result.gone.append(contender.node)
            continue
        except (KazooException, KazooTimeoutError) as exc:
            raise translate(
                exc, alias, f"delete {contender.node} (look again before retrying)", timeout=pool.cfg.connect_timeout
            ) from exc
        result.deleted.append(contender)
    return result
