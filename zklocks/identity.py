"""The ZooKeeper identity an alias gets without configuration: a digest credential derived from ``SECRET_KEY``.

Every process of a project shares its ``SECRET_KEY``, so every web process, Celery worker and beat derives the
same credential, and the nodes they create are guarded against everyone else without a setting (docs/security.md,
"Guarded by default"). The identity is the project's, not the alias's: aliases on one namespace (a second alias
with another session timeout, say) must be able to queue under each other's lock nodes.

While a key is rotated, ``SECRET_KEY_FALLBACKS`` are identities of the project too: sessions authenticate with
all of them and the nodes they create grant all of them, so that processes still on the old key keep working.
``manage.py zklocks_check --fix-acls`` then moves every node to the current key's identity.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

# The user name of every derived credential: the password tells projects (and keys) apart.
USER = "zklocks"
_SALT = b"zklocks.zookeeper-identity"
# The read-only identity: READ on every node the project's derived identity creates under READ_ACL="auth", and
# nothing else. Read-only tools (the admin, the health check, zklocks_status) on a READ_ONLY alias use it.
READER = "zklocks-reader"
_READER_SALT = b"zklocks.zookeeper-reader"


def derived_credential(secret_key: str | bytes, *, reader: bool = False) -> str:
    """The digest credential ("user:password") that ``secret_key`` gives; the password reveals nothing of the key.
    ``reader``: the read-only identity's, from which the project's own cannot be told."""
    key = secret_key.encode() if isinstance(secret_key, str) else secret_key
    digest = hmac.new(key, _READER_SALT if reader else _SALT, hashlib.sha256).digest()
    return f"{READER if reader else USER}:{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def project_keys(settings: Any) -> tuple[str | bytes, ...]:
    """``SECRET_KEY`` then ``SECRET_KEY_FALLBACKS``, leaving out empty ones; () when there is no key at all."""
    try:
        current = settings.SECRET_KEY
    except Exception:  # noqa: BLE001 - Django raises ImproperlyConfigured for an empty SECRET_KEY
        current = ""
    fallbacks = getattr(settings, "SECRET_KEY_FALLBACKS", ()) or ()
    if not current:
        return ()
    return tuple(dict.fromkeys(k for k in (current, *fallbacks) if isinstance(k, (str, bytes)) and k))


def derived_auth(keys: tuple[str | bytes, ...], *, reader: bool = False) -> tuple[tuple[str, str], ...]:
    """The AUTH an alias without one gets: the current key's credential first, then the fallbacks'. ``reader``:
    the read-only identity's (a READ_ONLY alias)."""
    return tuple(dict.fromkeys(("digest", derived_credential(k, reader=reader)) for k in keys))
