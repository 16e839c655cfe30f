"""Everything zklocks uses of kazoo beyond its public API, in one place (tests/packaging/test_kazoo_adapter.py
fails if another module names one of kazoo's private names).

- hooks.py: what each session installs on its client and its connection: the lease's view of the traffic, the
  short read path, the signal-safe send, the refusal of writes on a READ_ONLY alias; and the skipped close.
- calls.py: the calls other modules make instead of naming a private attribute, and the records built by position.
- compat.py: the self-check of the installed kazoo (before the first session, and system check zklocks.E060).

:data:`PRIVATE` declares each name: its owner, what in zklocks depends on it, the public kazoo API that would
replace it, and how compat.py checks it; and kazoo's records that zklocks builds by position or reads by field.
docs/compatibility.md lists them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# How compat.py checks an entry.
SIGNATURE = "signature"  # a method of the owner, with this signature
SET_ON_SELF = "set on self"  # an attribute some method of the owner sets on self
THROUGH_SELF = "through self"  # the owner's method ``caller`` uses self.<name> (and unpacks the result)
ON_CLIENT = "on client"  # ConnectionHandler's method ``caller`` uses <client>.<name>
FIELDS = "fields"  # a record with at least these fields (read by name)
RECORD = "record"  # a record of exactly these fields, in this order (built by position)
EXISTS = "exists"  # a module-level object of kazoo.protocol.serialization


class Check(NamedTuple):
    kind: str
    detail: Any = None  # the signature; the fields; for THROUGH_SELF and ON_CLIENT, the calling method
    lost: str = ""  # THROUGH_SELF, ON_CLIENT: what is lost if the caller stops using it
    unpacked: int | None = None  # THROUGH_SELF: the length of the tuple the result is unpacked into


class Private(NamedTuple):
    owner: str  # ConnectionHandler, KazooClient, or serialization (the module kazoo.protocol.serialization)
    name: str
    needs: str  # what in zklocks depends on it
    public: str  # the public kazoo API that would replace it (none of these exists in kazoo 2.11)
    checks: tuple[Check, ...]


_CONN, _CLIENT, _WIRE = "ConnectionHandler", "KazooClient", "serialization"
_SHORT = "the short read path would read another socket than kazoo"
_SEND = "a public send of a request record"

# fmt: off
PRIVATE: tuple[Private, ...] = (
    Private(_CONN, "_submit", "the lease records when each request goes out (session.py)",
            "a listener called as each request is sent", (
                Check(SIGNATURE, "(self, request, timeout, xid=None)"),
                Check(THROUGH_SELF, "_send_request", "requests would go out unseen by the lease"),
                Check(THROUGH_SELF, "_send_ping", "pings would go out unseen by the lease"))),
    Private(_CONN, "_read_header", "the lease reads the header of every answer (session.py)",
            "a listener called with each answer's header (xid, zxid, err)", (
                Check(SIGNATURE, "(self, timeout)"),
                Check(THROUGH_SELF, "_read_socket", "answers would never prove the lease", 3))),
    Private(_CONN, "_invoke", "the lease of a new connection is settled at its handshake (session.py)",
            "a listener called with the handshake's answer before CONNECTED is reported", (
                Check(SIGNATURE, "(self, timeout, request, xid=None)"),
                Check(THROUGH_SELF, "_connect", "a new connection's lease would never be settled", 2))),
    Private(_CONN, "_read", "the short read path replaces it (hooks.read_without_select)",
            "a read that does not select first when the socket has data", (
                Check(SIGNATURE, "(self, length, timeout)"),
                Check(THROUGH_SELF, "_read_header", "the short read path would be skipped"))),
    Private(_CONN, "_socket_error_handling", "the short read path reports socket errors as kazoo does",
            "as for _read", (
                Check(SIGNATURE, "(self)"),
                Check(THROUGH_SELF, "_read", "socket errors would be reported unlike kazoo's"))),
    Private(_CONN, "_socket", "the short read path reads it; the outage watch looks in it for an unread answer",
            "as for _read, and a query of whether an answer waits unread", (
                Check(SET_ON_SELF), Check(THROUGH_SELF, "_read", _SHORT), Check(THROUGH_SELF, "_connect", _SHORT))),
    Private(_CONN, "_write_sock", "the signal-safe send and the close wake the connection thread through it",
            "a send that lets a signal handler's exception through (kazoo's _call swallows it)", (
                Check(SET_ON_SELF),)),
    Private(_CLIENT, "_connection", "the hooks on the connection are installed through it",
            "the listeners above", (
                Check(SET_ON_SELF),)),
    Private(_CLIENT, "_call", "multiRead, releases and watch reads are sent through it; the signal-safe send "
            "and the READ_ONLY refusal replace it", _SEND + ", and a hook on the request path", (
                Check(SIGNATURE, "(self, request, async_object)"),)),
    Private(_CLIENT, "_create_async_inner", "contenders' creates are answered without kazoo's callback thread",
            "a create_async answered on the connection thread", (
                Check(SIGNATURE, "(self, path, value, acl, flags, trailing=False, include_data=False)"),)),
    Private(_CLIENT, "_queue", "the loop driver's gate counts it; the signal-safe send and the close queue on it",
            "a count of the requests not yet answered; " + _SEND, (
                Check(SET_ON_SELF), Check(ON_CLIENT, "_send_request", "the gate would not see queued requests"))),
    Private(_CLIENT, "_pending", "the loop driver's gate counts it",
            "a count of the requests not yet answered", (
                Check(SET_ON_SELF), Check(ON_CLIENT, "_send_request", "the gate would not see requests in flight"))),
    # kazoo.protocol.serialization: public records, built by position (RECORD) or read by field (FIELDS)
    Private(_WIRE, "CloseInstance", "the close a cut-short stop skipped is queued as it", "a stop that can resume",
            (Check(EXISTS),)),
    Private(_WIRE, "Connect", "the lease reads the negotiated timeout and the session id", "-",
            (Check(FIELDS, ("time_out", "session_id")),)),
    Private(_WIRE, "ReplyHeader", "the lease reads every answer's header", "-",
            (Check(FIELDS, ("xid", "zxid", "err")),)),
    Private(_WIRE, "MultiHeader", "multiRead builds and reads it", "a multiRead call",
            (Check(RECORD, ("type", "done", "err")),)),
    Private(_WIRE, "GetData", "multiRead builds it", "a multiRead call",
            (Check(RECORD, ("path", "watcher")),)),
    Private(_WIRE, "GetChildren", "multiRead and the listing of a lock node build it", _SEND,
            (Check(RECORD, ("path", "watcher")),)),
    Private(_WIRE, "Sync", "the synced reads build it", _SEND,
            (Check(RECORD, ("path",)),)),
    Private(_WIRE, "Exists", "the synced reads and the watch on a held node build it", _SEND,
            (Check(RECORD, ("path", "watcher")),)),
    Private(_WIRE, "Delete", "releases build it", _SEND,
            (Check(RECORD, ("path", "version")),)),
    Private(_WIRE, "SetData", "releases build it", _SEND,
            (Check(RECORD, ("path", "data", "version")),)),
    Private(_WIRE, "Transaction", "releases build it", _SEND,
            (Check(RECORD, ("operations",)),)),
)
# fmt: on

# The private names (the records are kazoo's public classes).
NAMES = frozenset(p.name for p in PRIVATE if p.name.startswith("_"))
