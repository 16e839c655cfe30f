"""The catch-up policy functions (zklocks/celery/catchup.py): spelling, missed ticks, decisions."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from zklocks.celery import catchup

app = Celery("catchup-unit")
app.conf.timezone = "UTC"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("spelling", "policy"),
    [("skip", ("skip", 0.0)), ("once", ("once", 0.0)), ("each:3", ("each", 3.0)), ("window:1.5", ("window", 1.5))],
)
def test_policies_parse(spelling, policy):
    assert tuple(catchup.parse(spelling)) == policy
    assert str(catchup.parse(spelling)) == spelling


@pytest.mark.timeout(10)
@pytest.mark.parametrize("bad", ["", "each", "each:0", "each:x", "window:0", "window:-1", "window:inf", "skip:1", 3])
def test_bad_policies_are_refused_with_the_spellings(bad):
    with pytest.raises(ValueError, match="catch-up policy"):
        catchup.parse(bad)


@pytest.mark.timeout(10)
def test_missed_ticks_of_an_interval_and_a_crontab():
    now = time.time()
    ticks = catchup.missed_ticks(schedule(2.0, app=app), now - 7.0, now, UTC)
    assert [round(t - now, 1) for t in ticks] == [-5.0, -3.0, -1.0]
    minutes = catchup.missed_ticks(crontab(app=app), now - 200, now, UTC)
    assert len(minutes) in (3, 4) and all(t % 60 < 0.01 or t % 60 > 59.99 for t in minutes)
    assert catchup.missed_ticks(schedule(10.0, app=app), now - 1.0, now, UTC) == []


@pytest.mark.timeout(10)
def test_decisions():
    now = 100.0
    ticks = [90.0, 94.0, 98.0]
    assert catchup.decide(catchup.parse("once"), ticks, now) == (None, [])
    assert catchup.decide(catchup.parse("skip"), ticks, now) == (98.0, [])
    assert catchup.decide(catchup.parse("each:2"), ticks, now) == (98.0, [94.0, 98.0])
    assert catchup.decide(catchup.parse("each:9"), ticks, now) == (98.0, ticks)
    assert catchup.decide(catchup.parse("window:10"), ticks, now) == (None, [])
    assert catchup.decide(catchup.parse("window:9"), ticks, now) == (98.0, [])
    assert catchup.decide(catchup.parse("skip"), [], now) == (None, [])


@pytest.mark.timeout(10)
def test_the_option_is_read_from_options_or_headers_and_never_sent():
    assert catchup.option_of({"zklocks_catch_up": "skip", "queue": "q"}) == "skip"
    assert catchup.option_of({"headers": {"zklocks_catch_up": "each:2"}}) == "each:2"
    assert catchup.option_of({"queue": "q"}) is None
    assert catchup.without_option({"zklocks_catch_up": "skip", "queue": "q"}) == {"queue": "q"}
    assert catchup.without_option({"headers": {"zklocks_catch_up": "skip", "x": 1}}) == {"headers": {"x": 1}}


@pytest.mark.timeout(10)
def test_a_tick_that_falls_due_after_the_election_is_no_missed_tick():
    """The plan counts the ticks due before the election, as the stamp's ``catch_up`` does; one that falls due
    while the new leader reads ZooKeeper is a regular send, not one of the backlog (a failover once sent only
    one of the two catch-up sends that "each:2" promises, the other unmarked)."""
    now = time.time()
    entry = SimpleNamespace(name="e", schedule=schedule(2.0, app=app), options={catchup.OPTION: "each:5"})
    entry.last_run_at = None
    elected_at = now - 2.0
    policy, backlog = catchup.plan(entry, now - 7.0, elected_at, catchup.parse("once"), UTC, logging.getLogger())
    assert str(policy) == "each:5"
    assert [round(t - now, 1) for t in backlog] == [-5.0, -3.0]
    assert all(t < elected_at for t in backlog)
    assert round(entry.last_run_at.timestamp() - now, 1) == -3.0


class _Row:  # the fields of django-celery-beat's PeriodicTask that note_one_off_sent reads
    def __init__(self, *, one_off=True, enabled=True, runs=0, changed=1000.0):
        self.one_off, self.enabled, self.total_run_count = one_off, enabled, runs
        self.date_changed = datetime.fromtimestamp(changed, tz=UTC)


class _Entry:
    def __init__(self, row):
        self.model = row


@pytest.mark.parametrize(
    ("row", "sent", "runs"),
    [
        (_Row(), 1001.0, 1),  # sent after the row's last change, never synced: its one run
        (_Row(), 999.0, 0),  # sent before the row changed (re-enabled, a new time): it runs again
        (_Row(one_off=False), 1001.0, 0),  # a periodic task: ZooKeeper's last send moves its last run only
        (_Row(enabled=False), 1001.0, 0),  # disabled already
        (_Row(runs=1), 1001.0, 1),  # synced: nothing to count
    ],
)
def test_a_one_off_sent_after_its_last_change_counts_as_run(row, sent, runs):
    catchup.note_one_off_sent(_Entry(row), sent)
    assert row.total_run_count == runs


def test_an_entry_without_a_row_is_left_alone():
    entry = object()
    catchup.note_one_off_sent(entry, 1001.0)  # a celery.beat entry has no model: nothing to do, nothing raised
