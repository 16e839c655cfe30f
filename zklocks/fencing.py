"""Fencing tokens on the protected resource: a Django QuerySet that refuses writes with a stale token, checking and
writing in one ``UPDATE ... WHERE fence <= token`` so that two writers cannot interleave (docs/design.md §11; usage:
docs/locks.md, "Fencing the protected resource").
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .exceptions import StaleToken

__all__ = ["FencedQuerySet", "StaleToken"]


class FencedQuerySet(models.QuerySet):
    """``update_if_token`` / ``update_or_reject``: writes guarded by a fencing-token column."""

    fence_field = "fence"

    def update_if_token(self, token: int, *, fence_field: str | None = None, **changes: Any) -> int:
        """Apply ``changes`` to the rows whose fence is <= ``token`` and record ``token`` as their fence.

        Returns the number of rows written. The same holder may write many times with its token; a holder with
        a lower token changes nothing. Rows of the queryset with a higher fence are left alone.
        """
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise ValueError(f"a fencing token is a non-negative int (lock.token), not {token!r}")
        field = fence_field or self.fence_field
        if field in changes:
            raise ValueError(f"{field!r} is the fence column: it is set from the token, not from changes")
        return self.filter(**{f"{field}__lte": token}).update(**{field: token}, **changes)

    def update_or_reject(self, token: int, *, fence_field: str | None = None, **changes: Any) -> int:
        """Like :meth:`update_if_token`, but all or nothing: if any row of the queryset has seen a higher token,
        write none and raise :class:`StaleToken`."""
        from django.db import transaction

        field = fence_field or self.fence_field
        with transaction.atomic(using=self.db):
            written = self.update_if_token(token, fence_field=field, **changes)
            # Rows we wrote now carry our token; any row still above it refused us.
            if self.filter(**{f"{field}__gt": token}).exists():
                raise StaleToken(token, self.model._meta.label)  # leaving atomic() by an error rolls back
        return written
