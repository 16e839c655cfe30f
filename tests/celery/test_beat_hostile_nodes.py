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


@pytest.mark.parametrize("signed_with", [None, "another-project-key-" + "k" * 40], ids=["unsigned", "another key"])
def test_a_shared_schedule_not_signed_by_this_project_is_not_run(app, settings, kz, caplog, signed_with):
    """The shared beat_schedule names tasks, their arguments and how often they go: one written by anyone who can
    write the namespace (no SECRET_KEY of this project) is ignored, said so, and the leader's schedule stays; the
    one a beat of this project publishes is applied."""
    import json

    from django.test import override_settings

    from zklocks.celery import schedule_share

    caplog.set_level(logging.INFO)
    beat = elected(app)
    try:
        path = f"{beat_state_path(beat._parent)}/{beat_state.SCHEDULE}"
        forged_schedule = {"forged": {"task": "evil.task", "schedule": 0.001, "args": ["rm -rf"]}}
        if signed_with is None:
            body = json.loads(schedule_share.dumps(forged_schedule, "intruder", 1.0))
            del body["sig"]
            forged = json.dumps(body).encode()
        else:
            with override_settings(SECRET_KEY=signed_with):
                forged = schedule_share.dumps(forged_schedule, "intruder", 1.0)
        kz.set(path, forged) if kz.exists(path) else kz.create(path, forged)
        beat._orphans_at = 0.0
        beat.tick()
        assert "forged" not in beat._inner.schedule and "nightly" in beat._inner.schedule
        assert any("not signed by a beat of this project" in r.getMessage() for r in caplog.records)
        genuine = {"hourly": {"task": "beat-hostile.hourly", "schedule": 3600.0}}
        kz.set(path, schedule_share.dumps(genuine, "web-2", 2.0))
        beat._orphans_at = 0.0
        beat.tick()
        assert "hourly" in beat._inner.schedule and "forged" not in beat._inner.schedule
    finally:
        beat.close()


def test_a_schedule_whose_arguments_have_int_keys_verifies_as_the_leader_reads_it():
    """JSON turns an int dict key into a string, and sorts it as text: the signature covers the schedule as the
    leader reads it back (before: every such schedule was "not signed by a beat of this project")."""
    from celery import Celery

    from zklocks.celery import schedule_share

    raw = schedule_share.dumps({"x": {"task": "t", "schedule": 60.0, "kwargs": {"d": {9: 1, 10: 2}}}}, "h", 1.0)
    host, entries = schedule_share.loads(raw, Celery("int-keys", set_as_current=False))
    assert host == "h" and entries["x"]["kwargs"] == {"d": {"9": 1, "10": 2}}
