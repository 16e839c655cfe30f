"""Bounded readers (docs/security.md, "Names and the admin"): whatever an open namespace holds, the read model
behind the admin, the health check and ``zklocks_status`` keeps each request and each answer bounded. Nodes of
a megabyte each leave a small server alive, names too long to be zklocks' are skipped and reported, and the
process's shared session, where a lock is held, is never suspended by a read.

Each test has a server of its own, with a small heap: what it proves is that this server survives."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from django.core.management import call_command
from kazoo.protocol.states import KazooState

from tests.support.helpers import raw_client, zk_settings
from zklocks import zk_lock
from zklocks.client.pools import close_all, connections
from zklocks.health import long_holds
from zklocks.names import MAX_NODE_LENGTH
from zklocks.ops.read_model import snapshot
from zklocks.testing import ZkServer

NAMESPACE = "/hostile/locks"
BIG = 900_000  # bytes of each forged node (a server refuses a request near its jute.maxbuffer, 1 MiB)
COUNT = 40  # forged locks, each with a holder of BIG bytes: 72 MB in a server of 256 MB
SMALL_HEAP = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# The default session timeout, not the suite's short one: a collection of the small heap on a loaded machine can
# pause the server longer than 2 s times two thirds (kazoo's read timeout), which says nothing about the readers.
TIMEOUTS = {"SESSION_TIMEOUT": 10.0, "CONNECT_TIMEOUT": 5.0}


@pytest.fixture
def small_server():
    with ZkServer(jvm_options=SMALL_HEAP) as server:
        yield server
    close_all()


def states_of(alias: str = "default") -> list:
    """Every state change of the alias's shared session from now on."""
    seen: list = []
    connections[alias].session().client.add_listener(seen.append)
    return seen


@pytest.mark.timeout(180)
def test_nodes_of_a_megabyte_each_leave_the_server_and_the_session_alive(small_server):
    forger = raw_client(small_server.hosts, anonymous=True)
    try:
        forger.ensure_path(NAMESPACE)
        for i in range(COUNT):
            forger.create(f"{NAMESPACE}/big-{i:02d}", b"x" * BIG)
            forger.create(f"{NAMESPACE}/big-{i:02d}/forged__lock__", b"y" * BIG, ephemeral=True, sequence=True)
        with zk_settings(small_server.hosts, NAMESPACE, AUTH="open", **TIMEOUTS):
            with zk_lock("real-one") as lock:
                changes = states_of()
                tracemalloc.start()
                try:
                    for _ in range(3):
                        snap = snapshot(["default"])
                        assert snap.errors == []
                        big = [lk for lk in snap.locks if lk.name.startswith("big-")]
                        assert len(big) == COUNT and all(len(lk.holders) == 1 for lk in big)
                        assert all(len(lk.holders[0].raw or "") <= 301 for lk in big)
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                # 72 MB were read three times; what the reads kept at once stays far below one pass.
                assert peak < 30_000_000, peak
                assert changes == [] and lock.is_held
                lock.ensure_held()
                out = io.StringIO()
                call_command("zklocks_status", "--json", stdout=out)
                assert len(json.loads(out.getvalue())["aliases"][0]["locks"]) == COUNT + 1
        assert forger.get(NAMESPACE) is not None  # the server still answers
    finally:
        forger.stop()
        forger.close()


@pytest.mark.timeout(120)
def test_names_too_long_to_be_zklocks_are_skipped_and_reported(small_server):
    forger = raw_client(small_server.hosts, anonymous=True)
    try:
        forger.ensure_path(NAMESPACE)
        for letter in "abc":
            forger.create(f"{NAMESPACE}/{letter * 200_000}")
        forger.create(f"{NAMESPACE}/queue-of-long-names")
        forger.create(f"{NAMESPACE}/queue-of-long-names/{'q' * 300_000}__lock__", ephemeral=True, sequence=True)
        with zk_settings(small_server.hosts, NAMESPACE, AUTH="open", **TIMEOUTS):
            with zk_lock("real-one") as lock:
                changes = states_of()
                snap = snapshot(["default"])
                assert snap.errors == []
                assert {lk.name for lk in snap.locks} == {"real-one", "queue-of-long-names"}
                (alias,) = snap.aliases
                assert len(alias.skipped) == 4, alias.skipped
                assert all(len(line) < 400 and f"longer than any zklocks makes ({MAX_NODE_LENGTH})" in line
                           for line in alias.skipped)  # fmt: skip
                assert sum("200000 characters" in line for line in alias.skipped) == 3
                assert long_holds(["default"], 3600) == []
                err = io.StringIO()
                call_command("zklocks_status", stdout=io.StringIO(), stderr=err)
                assert err.getvalue().count("not read") == 4
                assert changes == [] and lock.is_held
                assert connections["default"].session().client.state == KazooState.CONNECTED
    finally:
        forger.stop()
        forger.close()
