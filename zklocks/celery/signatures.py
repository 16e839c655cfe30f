"""Signatures with the project's SECRET_KEY (SECRET_KEY_FALLBACKS honoured while a key is rotated), over a text:
what the beats write and the workers or the leader trust (beat_fence.py's tick stamps, schedule_share.py's shared
schedule). Each use has a salt of its own, so that one kind of signature never passes for another."""

from __future__ import annotations

from django.core import signing
from django.core.exceptions import ImproperlyConfigured


def signature(text: str, salt: str) -> str:
    """The signature of ``text``; ImproperlyConfigured without a SECRET_KEY."""
    return signing.Signer(salt=salt).sign(text).rsplit(":", 1)[1]


def verified(text: str, sig: object, salt: str) -> bool:
    """Whether ``sig`` signs ``text``: False if forged, not a string, or if there is no SECRET_KEY to check with."""
    if not isinstance(sig, str):
        return False
    try:
        signing.Signer(salt=salt).unsign(f"{text}:{sig}")
    except (signing.BadSignature, ImproperlyConfigured):
        return False
    return True
