"""Beat's worker fencing across a wiped ensemble (zklocks/celery/beat_fence.py): tokens are zxids, which start
again low when ZooKeeper loses its data. A tick published before the wipe and run after it must not shut out every
tick of the new leader ("token 8 is older than token 410"); the ticks are compared within one lifetime of the data,
named by the election node's ctime."""

from __future__ import annotations

import pytest

from tests.support.helpers import wait_until
from zklocks.celery.beat_fence import StaleTick, admit, sign
from zklocks.celery.beat_state import world_of
from zklocks.client.deadline import Deadline
from zklocks.client.pools import connections
from zklocks.names import join_path

pytestmark = [pytest.mark.zk, pytest.mark.timeout(120)]


@pytest.fixture
def own_zk():
    """A server of the test's own: the test wipes it."""
    from zklocks.testing import ZkServer

    server = ZkServer()
    server.start()
    yield server
    server.cleanup()


def world(election: str) -> int:
    """Make the election node, as a candidate's acquire does, and read its world."""
    pool = connections["default"]
    session = pool.session()
    path = join_path(pool.cfg.namespace, election)
    session.client.ensure_path(path)
    return world_of(session, path, Deadline(10))


def stamp(token: int, world: int) -> dict:
    return sign({"election": "beat", "entry": "report", "token": token, "world": world})


def test_ticks_of_the_leader_after_a_wipe_run_though_their_tokens_are_smaller(zklocks_settings, own_zk):
    zklocks_settings(HOSTS=own_zk.hosts, SESSION_TIMEOUT=4.0, CONNECT_TIMEOUT=5.0)
    before = world("beat")
    admit(stamp(410, before))  # a tick of the leader before the wipe
    with pytest.raises(StaleTick):
        admit(stamp(409, before))  # fencing within one lifetime of the data

    own_zk.restart(wipe=True)
    wait_until(lambda: connections["default"].session().client.connected, timeout=30)
    after = world("beat")
    assert after > before
    # The late tick of the old leader is run on the new data first: its record names the old world.
    admit(stamp(410, before))
    admit(stamp(8, after))  # the new leader's first tick: its token is smaller, and it runs
    admit(stamp(9, after))
    with pytest.raises(StaleTick, match="replaced"):
        admit(stamp(411, before))  # a later tick of the old data: dropped, whatever its token
    with pytest.raises(StaleTick, match="older"):
        admit(stamp(8, after))
