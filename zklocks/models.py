"""The admin's ``Lock``: an unmanaged model with no table, so that the admin can register it, permissions
and content types exist, and ``LogEntry`` rows can point at a lock. Rows are never read from a database:
the admin builds them from ``zklocks.ops.read_model`` snapshots.
"""

from __future__ import annotations

from django.contrib.admin.utils import quote, unquote
from django.db import models

from .names import MAX_NODE_LENGTH


class Lock(models.Model):
    # "<alias, admin-quoted>/<lock node name>": unique per lock, and the node name already has no "/".
    key = models.CharField(primary_key=True, max_length=512)
    alias = models.CharField(max_length=100)
    name = models.CharField(max_length=200)

    class Meta:
        managed = False
        db_table = "zklocks_lock"  # never created
        verbose_name = "lock"
        verbose_name_plural = "locks"
        default_permissions = ("view",)
        permissions = [("force_release_lock", "Can force-release a lock (delete its holder's node)")]

    def __str__(self) -> str:
        return f"{self.name} ({self.alias})"

    @staticmethod
    def make_key(alias: str, node: str) -> str:
        return f"{quote(alias)}/{node}"

    @staticmethod
    def split_key(key: str) -> tuple[str, str]:
        """(alias, lock node name); ValueError for a key that cannot be one."""
        alias, sep, node = key.partition("/")
        if not sep or not alias or not node or "/" in node or node in (".", "..") or len(node) > MAX_NODE_LENGTH:
            raise ValueError(f"not a lock key: {key!r}")
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in node):
            raise ValueError(f"not a lock key: {key!r}")
        try:
            node.encode("utf-8")  # a lone surrogate must never reach kazoo's connection thread
        except UnicodeEncodeError:
            raise ValueError(f"not a lock key: {key!r}") from None
        return unquote(alias), node
