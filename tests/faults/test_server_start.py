"""Starting the test servers (zklocks.testing): a port another socket takes between the pick and the JVM's bind
makes the start try again on fresh ports; a server that exits is reported with its log.

The fault is injected where it happens for real: right after the held ports are released and before the server
binds them, a socket of the test binds one of them.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from zklocks.testing import ZkEnsemble, ZkServer, ZkStartError, four_letter, ports
from zklocks.testing.server import server_classpath

pytestmark = pytest.mark.timeout(180)


def thief_on(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


@pytest.fixture
def steal_once(monkeypatch):
    """``steal_once(server, what)``: the first time ``server`` spawns, another socket takes its ``what`` port
    ("client", "quorum" or "election") just before. Returns the list of stolen ports."""
    thieves: list[socket.socket] = []
    stolen: list[int] = []
    targets: dict[int, str] = {}
    spawn = ZkServer.spawn

    def spawning(self):
        what = targets.pop(id(self), None)
        if what is not None and (self.proc is None or self.proc.poll() is not None):
            self._release_ports()  # a standalone server holds its port until it spawns
            port = self.ports()[what]
            thieves.append(thief_on(port))
            stolen.append(port)
        spawn(self)

    monkeypatch.setattr(ZkServer, "spawn", spawning)

    def arm(server: ZkServer, what: str) -> list[int]:
        targets[id(server)] = what
        return stolen

    yield arm
    for s in thieves:
        s.close()


def test_ports_are_held_distinct_and_off_the_ephemeral_range():
    low, _ = ports.ephemeral_range()
    first, second = ports.Reservation(9), ports.Reservation(9)
    try:
        picked = first.ports + second.ports
        assert len(set(picked)) == 18
        if ports.pick_range() is not None:
            assert all(p < low for p in picked)
        for p in picked:
            with socket.socket() as probe, pytest.raises(OSError, match="Address already in use"):
                probe.bind(("127.0.0.1", p))  # held
        assert set(picked) <= ports.claimed()
        first.release()
        thief_on(first.ports[0]).close()  # released: free for the server to bind
        # Proxies (and every listening_socket(0)) stay off the ports of this process's servers.
        listeners = [ports.listening_socket() for _ in range(50)]
        assert not {s.getsockname()[1] for s in listeners} & set(picked)
        for s in listeners:
            s.close()
    finally:
        first.unclaim()
        second.unclaim()
    assert not set(picked) & ports.claimed()


def test_a_server_whose_client_port_is_taken_starts_again_on_a_fresh_one(steal_once, capsys):
    server = ZkServer(tick_time=200)
    stolen = steal_once(server, "client")
    try:
        server.start(timeout=60)
        assert stolen and server.port != stolen[0]
        assert server.listener(server.port) == "own"
        assert server.mode() == "standalone" and four_letter(server.port, "ruok") == "imok"
        err = capsys.readouterr().err
        assert f"client port {stolen[0]}" in err or "exited with" in err, err
        assert "trying again on fresh ports" in err
        if all(os.path.exists(j) for j in ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")):
            assert "slf4j-log4j12" in server_classpath()
            assert (server.dir / "server.log").exists()  # log4j writes it: an SLF4J binding is on the class path
    finally:
        server.cleanup()
    assert server.proc is None


@pytest.mark.parametrize("what", ["election", "client"])
def test_an_ensemble_that_lost_a_port_starts_again_on_fresh_ports(steal_once, capsys, what):
    ens = ZkEnsemble(3, tick_time=200, server_links=True)
    stolen = steal_once(ens.servers[1], what)
    try:
        began = time.monotonic()
        ens.start(timeout=90)
        took = time.monotonic() - began
        own = [p for s in ens.servers for p in s.ports().values()]
        assert stolen and stolen[0] not in own, (stolen, own)
        assert len(set(own)) == len(own)
        assert ens.ready()
        leader = ens.leader()
        assert leader is not None and len(ens.followers()) == 2
        for s in ens.servers:
            assert s.listener(s.port) == "own" and s.listener(s.election_port) == "own", ens.describe(logs=False)
        assert leader.listener(leader.quorum_port) == "own"
        assert f"127.0.0.1:{ens.servers[1].port}" in ens.hosts
        # The links were moved to the new ports with the servers: the ensemble talks through them.
        assert ens.links is not None and sum(ens.links.connections().values()) > 0
        err = capsys.readouterr().err
        assert "trying again on fresh ports" in err and "server 2" in err, err
        print(f"started on fresh ports after the {what} port {stolen[0]} was taken, in {took:.1f}s")
    finally:
        ens.cleanup()
    assert all(s.proc is None for s in ens.servers)


def test_a_server_that_exits_is_reported_with_its_log(capsys):
    # initLimit is not a number: the server exits at once ("Invalid config, exiting abnormally").
    server = ZkServer(tick_time=200, extra={"initLimit": "not-a-number"})
    try:
        began = time.monotonic()
        with pytest.raises(ZkStartError) as info:
            server.start(timeout=30)
        assert time.monotonic() - began < 30
        message = str(info.value)
        assert "exited with" in message, message
        assert "Invalid config" in message and "stdout.log" in message, message
        if "slf4j-log4j12" in server_classpath():
            assert "server.log" in message, message  # written by log4j through the SLF4J binding
        assert "exited with" in capsys.readouterr().err  # printed before cleanup() removes the logs
        assert server.proc is None or server.proc.poll() is not None
    finally:
        server.cleanup()


def test_a_member_that_exits_after_the_start_is_described_with_its_log():
    ens = ZkEnsemble(3, tick_time=200)
    try:
        ens.start()
        victim = ens.followers()[0]
        victim.kill()
        with pytest.raises(ZkStartError, match=f"server {victim.myid} exited with"):
            ens.ready()
        text = ens.describe()
        assert f"server {victim.myid} (pid {victim.proc.pid}, exited with -9" in text, text
        assert "stdout.log" in text
    finally:
        ens.cleanup()


def test_an_ensemble_restarts_on_its_ports_with_its_data_wiped():
    """ZkEnsemble.restart(wipe=True): the same ports, myid and config kept, every node gone, zxids (hence the
    czxid tokens) counted from the start again."""
    from tests.support.helpers import raw_client

    with ZkEnsemble(3, tick_time=200) as ens:
        hosts = ens.hosts
        kz = raw_client(hosts)
        try:
            for i in range(10):
                kz.create(f"/before-{i}")
            before = kz.exists("/before-9").czxid
        finally:
            kz.stop()
            kz.close()
        ens.restart(wipe=True)
        assert ens.hosts == hosts
        assert [(s.dir / "data" / "myid").read_text() for s in ens.servers] == ["1\n", "2\n", "3\n"]
        kz = raw_client(hosts)
        try:
            assert [c for c in kz.get_children("/") if c.startswith("before-")] == []
            kz.create("/after")
            assert kz.exists("/after").czxid < before
        finally:
            kz.stop()
            kz.close()
        with pytest.raises(RuntimeError, match="is running"):
            ens.servers[0].wipe()
