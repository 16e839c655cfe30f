"""What the leader-elected beat logs, in process: a clean stop is INFO (a lost leadership stays a WARNING), and
the number of last sends read from ZooKeeper on election is spelled right for one entry too."""

import logging

import pytest

from tests.support.beat_in_process import elected, memory_app

pytestmark = pytest.mark.zk

STEPPED_DOWN = "beat: stepping down as leader"


@pytest.fixture
def app(settings):
    return memory_app(settings, "beat-logs")


def messages(caplog, start: str) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith(start)]


def test_a_clean_stop_logs_at_info(app, caplog):
    caplog.set_level(logging.INFO)
    beat = elected(app)
    beat.close()
    assert messages(caplog, STEPPED_DOWN) == [
        (logging.INFO, f"{STEPPED_DOWN} of {beat.election!r} (alias 'default'): shutting down")
    ]


def test_a_lost_leadership_stays_a_warning(app, caplog):
    caplog.set_level(logging.INFO)
    beat = elected(app)
    try:
        beat._step_down("leadership lost")
        assert [level for level, _ in messages(caplog, STEPPED_DOWN)] == [logging.WARNING]
    finally:
        beat.close()


def test_the_count_of_last_sends_is_singular_for_one(app, caplog):
    caplog.set_level(logging.INFO)
    first = elected(app)
    assert first.claim(first._inner.schedule["nightly"]) is not None  # records the send in ZooKeeper
    first.close()
    second = elected(app)
    second.close()
    elected_lines = [text for _, text in messages(caplog, "beat: elected leader of")]
    assert len(elected_lines) == 2, elected_lines
    assert elected_lines[0].endswith("last sends of 0 entries read from ZooKeeper"), elected_lines
    assert elected_lines[1].endswith("last sends of 1 entry read from ZooKeeper"), elected_lines
