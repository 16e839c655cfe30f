"""A ZooKeeper ensemble on loopback for tests: n members, each in its own process group, and, with
``server_links=True``, links between them that a test can cut (see :mod:`zklocks.testing.links`).

Its start follows the rules of :mod:`zklocks.testing.server`: ports held until the members spawn, a start that
lost a port tried again on fresh ports, ZkStartError with each member's state and log.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from . import ports as _ports
from .server import ZkServer
from .startup import StartedInWith, poll_until, start_attempts


class ZkEnsemble(StartedInWith):
    """A 3-node (or n-node) ensemble on loopback, each member in its own process group.

    With ``server_links=True`` the servers reach each other only through proxies the ensemble owns
    (:mod:`zklocks.testing.links`), and a test can partition them: ``cut(i, j)``, ``heal(i, j)``,
    ``isolate(i)``, ``split([[0], [1, 2]])``, ``heal_all()``. Servers are given by index (0-based) or as
    :class:`ZkServer`. Clients keep their direct connections to every server.

    Its ports (each member's client, quorum and election port) are picked together and held until the servers
    spawn; ``start()`` is over when one server leads, the others follow, and each listens on its own ports.
    A first start that fails is killed and tried again on fresh ports (``hosts`` is final once it returns).
    """

    def __init__(
        self, size: int = 3, *, tick_time: int = 200, force_sync: bool = False, server_links: bool = False
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="zklocks-ensemble-"))
        self._reservation = _ports.Reservation(3 * size)
        self.servers = [
            ZkServer(
                tick_time=tick_time,
                force_sync=force_sync,
                workdir=str(self.dir / f"s{i}"),
                myid=i,
                port=0,  # set by _assign_ports, as after a repick
            )
            for i in range(1, size + 1)
        ]
        self._assign_ports()
        self._served = False
        self.links = None
        if server_links:
            from .links import ServerLinks

            # The proxies bind their own ports while the servers' ports are held: none can take one of them.
            self.links = ServerLinks(
                [s.myid for s in self.servers if s.myid is not None],
                [s.quorum_port for s in self.servers if s.quorum_port is not None],
                [s.election_port for s in self.servers if s.election_port is not None],
            )
        self._set_peers()

    def _assign_ports(self) -> None:
        n = len(self.servers)
        picked = self._reservation.ports
        for i, s in enumerate(self.servers):
            s.port, s.quorum_port, s.election_port = picked[i], picked[n + i], picked[2 * n + i]

    def _set_peers(self) -> None:
        if self.links is not None:
            for i, s in enumerate(self.servers):
                s.peers = self.links.peers_for(i)
            return
        peers = "\n".join(f"server.{s.myid}=127.0.0.1:{s.quorum_port}:{s.election_port}" for s in self.servers)
        for s in self.servers:
            s.peers = peers

    def _repick(self) -> None:
        old = self._reservation
        self._reservation = _ports.Reservation(3 * len(self.servers), avoid=old.ports)
        old.unclaim()
        self._assign_ports()
        if self.links is not None:
            self.links.retarget(
                [s.quorum_port for s in self.servers if s.quorum_port is not None],
                [s.election_port for s in self.servers if s.election_port is not None],
            )
        self._set_peers()

    @property
    def name(self) -> str:
        return f"the {len(self.servers)}-server ensemble"

    # -- partitions between servers (server_links=True) --

    def index(self, server: int | ZkServer) -> int:
        return self.servers.index(server) if isinstance(server, ZkServer) else int(server)

    def _links(self):
        if self.links is None:
            raise RuntimeError("this ensemble has no server links: create it with ZkEnsemble(server_links=True)")
        return self.links.links

    def cut(self, i: int | ZkServer, j: int | ZkServer, *, mode: str = "blackhole", one_way: bool = False) -> None:
        """Cut the link between servers i and j (both directions; only i -> j with ``one_way``).
        ``mode="blackhole"`` holds every byte (a real partition); ``mode="reset"`` closes their connections."""
        self._links().cut(self.index(i), self.index(j), mode=mode, one_way=one_way)

    def heal(self, i: int | ZkServer, j: int | ZkServer) -> None:
        self._links().heal(self.index(i), self.index(j))

    def isolate(self, i: int | ZkServer, *, mode: str = "blackhole") -> None:
        """Cut server i from every other server (its clients still reach it)."""
        i = self.index(i)
        for j in range(len(self.servers)):
            if j != i:
                self._links().cut(i, j, mode=mode)

    def split(self, groups: list[list[int | ZkServer]], *, mode: str = "blackhole") -> None:
        """Partition the servers into ``groups``: every link between two groups is cut."""
        idx = [[self.index(s) for s in g] for g in groups]
        for a, group in enumerate(idx):
            for other in idx[a + 1 :]:
                for i in group:
                    for j in other:
                        self._links().cut(i, j, mode=mode)

    def heal_all(self) -> None:
        self._links().heal_all()

    @property
    def hosts(self) -> str:
        return ",".join(s.hosts for s in self.servers)

    # -- starting, and knowing it is whole --

    def ready(self) -> bool:
        """True once one server leads and the others follow, each on its own ports (see
        :meth:`ZkServer.serving_mode`); ZkStartError when it never will (a server exited, or another socket
        listens on one of a server's ports)."""
        modes = [s.serving_mode() for s in self.servers]
        if None in modes:
            return False
        if len(modes) == 1:
            return True
        return modes.count("leader") == 1 and modes.count("follower") == len(modes) - 1

    def describe(self, *, logs: bool = True, lines: int = 25) -> str:
        """Each server's state, mode and port owners, and (``logs``) the tail of its logs."""
        return "\n".join(s.describe(logs=logs, lines=lines) for s in self.servers)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until :meth:`ready`; ZkStartError with every server's state and logs if it is not within
        ``timeout``, or never can be. The processes are left as they are."""
        n = len(self.servers)
        message = f"no leader with {n - 1} followers, each on its own ports, within {timeout:.0f}s"
        poll_until(self.ready, self.describe, message, timeout)

    def _kill_all(self) -> None:
        for s in self.servers:
            s.kill()

    def _movable(self) -> bool:
        return not self._served

    def start(self, timeout: float = 90.0) -> ZkEnsemble:
        """Spawn the servers that do not run and wait until :meth:`ready`. The first start is tried again on
        fresh ports if it fails (all within ``timeout``); ZkStartError (every server's state and logs, also
        printed on stderr) when it does not succeed, with the servers killed."""

        def attempt(deadline: float) -> None:
            self._reservation.release()
            for s in self.servers:
                s.spawn()
            n = len(self.servers)
            poll_until(
                self.ready,
                None,
                f"no leader with {n - 1} followers on their own ports in time",
                deadline - time.monotonic(),
            )

        start_attempts(self, attempt, self._kill_all, self._repick, self._movable, self.describe, timeout)
        self._served = True
        for s in self.servers:
            s._served = True
        return self

    def leader(self) -> ZkServer | None:
        for s in self.servers:
            if s.mode() == "leader":
                return s
        return None

    def followers(self) -> list[ZkServer]:
        return [s for s in self.servers if s.mode() == "follower"]

    def wait_quorum(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.leader() is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("ensemble has no leader")

    def restart(self, timeout: float = 90.0, *, wipe: bool = False) -> None:
        """kill -9 every server, then start them all again on the same ports and wait until :meth:`ready`.

        ``wipe=True`` deletes every server's data in between (:meth:`ZkServer.wipe`: snapshots, transaction logs
        and epochs go, ``myid`` and the config stay): the ensemble comes back empty, as after the loss of every
        disk. Its zxids, hence the czxid fencing tokens, start again from small
        numbers, and the clients that saw later zxids must start new sessions."""
        for s in self.servers:
            s.kill()
            s.proc = None
        if wipe:
            for s in self.servers:
                s.wipe()
        self.start(timeout)

    def cleanup(self) -> None:
        for s in self.servers:
            s.stop()
        if self.links is not None:
            self.links.stop()
        self._reservation.unclaim()
        shutil.rmtree(self.dir, ignore_errors=True)
