"""A beat publishes its ``beat_schedule`` for the leader once ZooKeeper could be asked: an outage when the beat
starts must not keep its schedule from the leader for the beat's whole life (celery/beat.py, _become_leader)."""

import logging

import pytest
from celery.schedules import schedule

from tests.support.helpers import zk_settings
from zklocks.celery import beat_state, schedule_share
from zklocks.client.deadline import Deadline
from zklocks.client.pools import close_all, connections
from zklocks.names import join_path

pytestmark = pytest.mark.zk

log = logging.getLogger("tests.beat")
ENTRIES = {"report": {"task": "shop.report", "schedule": schedule(60.0)}}


def shared_schedule(election: str):
    session = connections["default"].session()
    path = join_path(connections["default"].cfg.namespace, election)
    return beat_state.read_schedule(session, path, Deadline(session.cfg.connect_timeout))


def test_publish_says_whether_zookeeper_could_be_asked(own_zk):
    with zk_settings(own_zk.hosts, "/publish", CONNECT_TIMEOUT=1.0):
        own_zk.stop()
        try:
            assert schedule_share.publish_own("default", "beat", ENTRIES, "host-a", log) is False
        finally:
            close_all()
            own_zk.start()
        # Asked again (the beat's next stand), it publishes; then the schedule is there and stays settled.
        assert schedule_share.publish_own("default", "beat", ENTRIES, "host-a", log) is True
        assert schedule_share.same_entries(shared_schedule("beat")[0], ENTRIES)
        assert schedule_share.publish_own("default", "beat", ENTRIES, "host-a", log) is True
