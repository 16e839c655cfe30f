"""Beat stamps are signed (zklocks/celery/beat_fence.py): a message forged by anyone who can publish to the broker,
say with a token of 2**62, must not record anything, or every genuine tick of its entry after it would be dropped.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import override_settings

from zklocks.celery.beat_fence import sign, signed


def stamp(**changes) -> dict:
    return {"election": "beat", "entry": "report", "token": 4711, "world": 1700000000000, "sent_at": 1.5, **changes}


def test_a_signed_stamp_verifies_and_any_change_breaks_it():
    genuine = sign(stamp(due=1.25, catch_up=True))
    assert signed(genuine)
    for field, forged in [("token", 2**62), ("world", 2**62), ("entry", "other"), ("due", 9.0), ("catch_up", None)]:
        assert not signed({**genuine, field: forged}), field
    assert not signed(stamp())  # unsigned: a forged header, or a beat of another project
    assert not signed({**stamp(), "sig": "x" * 27})


def test_a_rotated_secret_key_keeps_ticks_signed_with_its_fallback():
    with override_settings(SECRET_KEY="old-key-" + "x" * 50):
        genuine = sign(stamp())
    with override_settings(SECRET_KEY="new-key-" + "y" * 50, SECRET_KEY_FALLBACKS=["old-key-" + "x" * 50]):
        assert signed(genuine)
    with override_settings(SECRET_KEY="new-key-" + "y" * 50, SECRET_KEY_FALLBACKS=[]):
        assert not signed(genuine)


@pytest.mark.zk
def test_a_forged_tick_at_the_workers_start_records_nothing_and_genuine_ticks_go_on(zklocks_settings, kz):
    """What a fencing worker does with a task's stamp before the task starts (beat_fence._before_start): a forged
    stamp, unsigned or signed with another key, is dropped (Ignore) and records nothing; the genuine tick that
    comes after it, with a far smaller token, is admitted."""
    from types import SimpleNamespace

    from celery.exceptions import Ignore

    from zklocks import conf
    from zklocks.celery import beat_fence

    zklocks_settings()
    election = f"beat-forged-{uuid.uuid4().hex[:8]}"
    path = beat_fence.executed_path(conf.alias_config().namespace, election, "report")
    with override_settings(SECRET_KEY="another-project-" + "z" * 50):
        signed_elsewhere = sign(stamp(election=election, token=2**62))
    for forged in (stamp(election=election, token=2**62), signed_elsewhere):
        task = SimpleNamespace(request=SimpleNamespace(zklocks_beat=forged, headers={}))
        with pytest.raises(Ignore):
            beat_fence._before_start(task, "forged-task", (), {})
        assert kz.exists(path) is None
    beat_fence.admit(sign(stamp(election=election, token=7)), "genuine-task")
    assert json.loads(kz.get(path)[0])["token"] == 7


@pytest.mark.zk
@pytest.mark.parametrize(
    "forged",
    [
        {"token": 2**62, "world": 2**62},  # an older record's shape, written by anyone who can write ZooKeeper
        {"token": 2**62, "stamp": stamp(token=2**62, sig="x" * 27)},
        "[" * 100_000,  # nested past the parser's recursion limit
    ],
    ids=["unsigned", "badly signed", "deep"],
)
def test_a_record_forged_in_zookeeper_shuts_out_no_genuine_tick(zklocks_settings, kz, forged):
    """The record of the newest tick run (beat_fence.admit) counts only if it carries a stamp that a beat of this
    project signed for that entry: a record written by anyone with write access to ZooKeeper, with a token of
    2**62, would otherwise make every genuine tick of the entry StaleTick for ever."""
    from zklocks import conf
    from zklocks.celery import beat_fence

    zklocks_settings()
    election = f"beat-recorded-{uuid.uuid4().hex[:8]}"
    path = beat_fence.executed_path(conf.alias_config().namespace, election, "report")
    raw = forged.encode() if isinstance(forged, str) else json.dumps(forged).encode()
    kz.create(path, raw, makepath=True)
    beat_fence.admit(sign(stamp(election=election, token=7)), "genuine-task")
    assert json.loads(kz.get(path)[0])["token"] == 7
    with pytest.raises(beat_fence.StaleTick):  # and the genuine record fences as before
        beat_fence.admit(sign(stamp(election=election, token=6)), "late-task")
