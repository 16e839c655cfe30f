"""Nodes in the beat's state that this alias did not write, beside the ones it did (in process, real ZooKeeper):
one node it may not read must not stop every beat from leading or from adopting orphaned ticks."""

import logging

import pytest
from kazoo.security import make_digest_acl

from tests.support.beat_in_process import elected, memory_app
from zklocks import conf
from zklocks.celery import beat_state
from zklocks.names import join_path
from zklocks.recipes.layout import beat_state_path

pytestmark = pytest.mark.zk

SKIPPED = "which this alias may not read"


@pytest.fixture
def app(settings):
    return memory_app(settings, "beat-hostile")


def test_a_node_the_alias_may_not_read_stops_no_beat_from_leading(app, settings, kz, caplog):
    caplog.set_level(logging.WARNING)
    election = join_path(conf.alias_config().namespace, settings.ZKLOCKS_BEAT["ELECTION"])
    state = beat_state_path(election)
    foreign = [make_digest_acl("someone", "else", all=True)]  # this alias gets no READ
    kz.ensure_path(f"{state}/{beat_state.ORPHANS}")
    kz.create(f"{state}/not-an-entry", b"{}", acl=foreign)
    kz.create(f"{state}/{beat_state.ORPHANS}/not-an-entry-1", b"{}", acl=foreign)
    beat = elected(app)  # before: ZkAuthError on election, stepping down at once, again and again
    try:
        beat._inner.apply_entry(beat._inner.schedule["nightly"])  # it claims and sends
        assert "nightly" in beat._claims
        beat._orphans_at = 0.0
        beat.tick()  # the look for orphans reads past the unreadable note
        skipped = [r.getMessage() for r in caplog.records if SKIPPED in r.getMessage()]
        assert any("not-an-entry-1" in m for m in skipped) and any("/not-an-entry" in m for m in skipped), skipped
        assert not [r for r in caplog.records if "could not look for orphaned claims" in r.getMessage()]
        assert beat.leader.is_leader
    finally:
        beat.close()
