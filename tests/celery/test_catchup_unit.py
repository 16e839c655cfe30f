"""The catch-up policy functions (zklocks/celery/catchup.py): spelling, missed ticks, decisions."""

from __future__ import annotations

import logging
import time
from datetime import UTC
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
