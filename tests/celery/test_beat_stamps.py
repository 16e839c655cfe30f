"""Beat stamps are signed (zklocks/celery/beat_fence.py): a message forged by anyone who can publish to the broker,
say with a token of 2**62, must not record anything, or every genuine tick of its entry after it would be dropped.
"""

from __future__ import annotations

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
