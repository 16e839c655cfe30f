"""Everything zklocks uses of kazoo beyond its public API, in one place (tests/packaging/test_kazoo_adapter.py
fails if another module names one of kazoo's private names).

- hooks.py: what each session installs on its client and its connection: the lease's view of the traffic, the
  short read path, the signal-safe send, the refusal of writes on a READ_ONLY alias; and the skipped close.
- calls.py: the calls other modules make instead of naming a private attribute, and the records built by position.
- wire.py: zklocks' own request record (multiRead), written and read with kazoo's serialization helpers.
- compat.py: the self-check of the installed kazoo (before the first session, and system check zklocks.E060).

:data:`PRIVATE` declares each private name, record and duck contract zklocks relies on, and how compat.py checks it;
:data:`CONNECTION_THREAD` each zklocks callable that kazoo runs on its connection thread (docs/compatibility.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# How compat.py checks an entry.
SIGNATURE = "signature"  # a method of the owner, with this signature
SET_ON_SELF = "set on self"  # an attribute some method of the owner sets on self
THROUGH_SELF = "through self"  # the owner's method ``caller`` uses self.<name> (and unpacks the result)
USED_IN = "used in"  # ConnectionHandler's method ``caller`` uses .<name> (of the client, a request or a result)
FIELDS = "fields"  # a record with at least these fields (read by name)
RECORD = "record"  # a record of exactly these fields, in this order (built by position)
EXISTS = "exists"  # a module-level object of kazoo.protocol.serialization
STRUCT = "struct"  # a struct.Struct of kazoo.protocol.serialization with this format
OPCODE = "opcode"  # a record whose ``type`` (its opcode on the wire) is this number


class Check(NamedTuple):
    kind: str
    detail: Any = None  # the signature; the fields; the format; the opcode; for THROUGH_SELF and USED_IN, the caller
    lost: str = ""  # THROUGH_SELF, USED_IN: what is lost if the caller stops using it
    unpacked: int | None = None  # THROUGH_SELF: the length of the tuple the result is unpacked into


class Private(NamedTuple):
    owner: str  # ConnectionHandler, KazooClient, AsyncResult, or serialization (kazoo.protocol.serialization)
    name: str
    needs: str  # what in zklocks depends on it
    public: str  # the public kazoo API that would replace it (none of these exists in kazoo 2.11)
    checks: tuple[Check, ...]


_CONN, _CLIENT, _RESULT, _WIRE = "ConnectionHandler", "KazooClient", "AsyncResult", "serialization"
_SHORT = "the short read path would read another socket than kazoo"
_SEND = "a public send of a request record"
_MULTI = "send() of zklocks' own record (upstream/kazoo 0003); no multiRead call (upstream/kazoo/README.md)"

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
    Private(_CONN, "_write_sock", "the signal-safe send and the close wake the connection thread through it, "
            "never blocking (a full socket pair during an outage; zklocks' handler makes it non-blocking)",
            "a send that lets a signal handler's exception through (kazoo's _call swallows it) and never blocks", (
                Check(SET_ON_SELF),)),
    Private(_CONN, "_connection_routine", "a contended release does not wait for its answer where answers are "
            "read: on the connection thread (a finalizer's release), or anywhere on green threads (recipes/node.py)",
            "a public way to tell whether the calling thread is the connection thread", (
                Check(SET_ON_SELF),)),
    Private(_CLIENT, "_connection", "the hooks on the connection are installed through it",
            "the listeners above", (
                Check(SET_ON_SELF),)),
    Private(_CLIENT, "_call", "multiRead, releases and watch reads are sent through it; the signal-safe send "
            "and the READ_ONLY refusal replace it", _SEND + ", and a hook on the request path", (
                Check(SIGNATURE, "(self, request, async_object)"),)),
    Private(_CLIENT, "_create_async_inner", "contenders' creates are answered without kazoo's callback thread",
            "send(Create2(...)) (upstream/kazoo 0003)", (
                Check(SIGNATURE, "(self, path, value, acl, flags, trailing=False, include_data=False)"),)),
    # A public method, but replaced on every session's client (hooks.raise_through_wakeup), by this signature.
    Private(_CLIENT, "create_async", "a signal handler's exception raised while a create is sent is raised at once "
            "(hooks.py), not kept for the result", "-",
            (Check(SIGNATURE, "(self, path, value=b'', acl=None, ephemeral=False, sequence=False, makepath=False, "
                   "include_data=False)"),)),
    Private(_CLIENT, "_queue", "the loop driver's gate counts it; the signal-safe send and the close queue on it",
            "a count of the requests not yet answered; " + _SEND, (
                Check(SET_ON_SELF), Check(USED_IN, "_send_request", "the gate would not see queued requests"))),
    Private(_CLIENT, "_pending", "the loop driver's gate counts it",
            "a count of the requests not yet answered", (
                Check(SET_ON_SELF), Check(USED_IN, "_send_request", "the gate would not see requests in flight"))),
    Private(_RESULT, "__init__", "each session's handler builds kazoo's results with a signal-safe condition "
            "(iohandler.py)", "-", (Check(SIGNATURE, "(self, handler, condition_factory, timeout_factory)"),)),
    # Duck contracts of what zklocks hands to the connection thread (recipes/node.py's release outcome, wire.py).
    Private(_CONN, "set", "a request's result object gets its answer (calls.Outcome)", "-",
            (Check(USED_IN, "_read_response", "a release's outcome would never be told"),)),
    Private(_CONN, "set_exception", "a request's result object gets its error (calls.Outcome)", "-",
            (Check(USED_IN, "_read_response", "a failed release would never be told"),)),
    Private(_CONN, "serialize", "a request record writes itself (wire.MultiRead)", _MULTI,
            (Check(USED_IN, "_submit", "multiRead would go out garbled"),)),
    Private(_CONN, "deserialize", "a request record reads its own answer (wire.MultiRead)", _MULTI,
            (Check(USED_IN, "_read_response", "multiRead's answers would be misread"),)),
    # kazoo.protocol.serialization: public records, built by position (RECORD) or read by field (FIELDS)
    Private(_WIRE, "CloseInstance", "the close a cut-short stop skipped is queued as it",
            "send(CloseInstance) (upstream/kazoo 0003)",
            (Check(EXISTS),)),
    Private(_WIRE, "Connect", "the lease reads the negotiated timeout, the session id and read-only", "-",
            (Check(FIELDS, ("time_out", "session_id", "read_only")),)),
    Private(_WIRE, "ReplyHeader", "the lease reads every answer's header", "-",
            (Check(FIELDS, ("xid", "zxid", "err")),)),
    Private(_WIRE, "MultiHeader", "multiRead builds and reads it", _MULTI,
            (Check(RECORD, ("type", "done", "err")),)),
    Private(_WIRE, "GetData", "multiRead builds it and reads its answers by its opcode", _MULTI,
            (Check(RECORD, ("path", "watcher")), Check(OPCODE, 4))),
    Private(_WIRE, "GetChildren", "multiRead and the listing of a lock node build it", _SEND,
            (Check(RECORD, ("path", "watcher")), Check(OPCODE, 8))),
    Private(_WIRE, "ZnodeStat", "multiRead reads a node's stat by position", _MULTI,
            (Check(RECORD, ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
                            "ephemeralOwner", "dataLength", "numChildren", "pzxid")),)),
    Private(_WIRE, "int_struct", "multiRead reads counts and errors", _MULTI, (Check(STRUCT, "!i"),)),
    Private(_WIRE, "multiheader_struct", "multiRead ends its request", _MULTI,
            (Check(STRUCT, "!iBi"),)),
    Private(_WIRE, "stat_struct", "multiRead reads a node's stat", _MULTI,
            (Check(STRUCT, "!qqqqiiiqiiq"),)),
    Private(_WIRE, "read_buffer", "multiRead reads a node's data", _MULTI, (Check(EXISTS),)),
    Private(_WIRE, "read_string", "multiRead reads a child's name", _MULTI, (Check(EXISTS),)),
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

# The private names (the records, helpers and duck contracts are public names).
NAMES = frozenset(p.name for p in PRIVATE if p.name.startswith("_") and not p.name.startswith("__"))


class Callback(NamedTuple):
    where: str  # the zklocks callable: module (under zklocks/) and qualified name
    called_by: str  # the kazoo code that calls it on its connection thread
    how: str  # what keeps that thread's loop alive


# Every zklocks callable that kazoo runs on its connection thread (tests/packaging/test_kazoo_adapter.py finds
# them by shape and fails on one not listed). None may block; an exception it lets out would end kazoo's loop.
# fmt: off
CONNECTION_THREAD: tuple[Callback, ...] = (
    Callback("client/kazoo_adapter/hooks.py:wrap_connection._submit", "ConnectionHandler._submit",
             "tells the listener (below), then calls kazoo's own"),
    Callback("client/kazoo_adapter/hooks.py:wrap_connection._read_header", "ConnectionHandler._read_header",
             "calls kazoo's own, then tells the listener"),
    Callback("client/kazoo_adapter/hooks.py:wrap_connection._invoke", "ConnectionHandler._invoke (the handshake)",
             "calls kazoo's own, telling the listener before and after a handshake"),
    Callback("client/kazoo_adapter/hooks.py:wrap_connection.create_connection", "ConnectionHandler._connect "
             "(handler.create_connection)", "caps the timeout, then calls the handler's own"),
    Callback("client/session.py:Session.request_sent", "hooks.wrap_connection (its TrafficListener)",
             "records a time; no I/O of its own"),
    Callback("client/session.py:Session.answer_read", "hooks.wrap_connection (its TrafficListener)",
             "records a time and an answer; no I/O of its own"),
    Callback("client/session.py:Session.handshake_sent", "hooks.wrap_connection (its TrafficListener)",
             "records a time"),
    Callback("client/session.py:Session.handshake_answered", "hooks.wrap_connection (its TrafficListener)",
             "settles the lease; arms the keeper without waiting"),
    Callback("client/session.py:Session._on_state", "KazooClient's state listeners (add_listener)",
             "sets events and wakes waiters; observers are guarded (observe.py)"),
    Callback("client/kazoo_adapter/calls.py:Outcome", "ConnectionHandler._read_response (set, set_exception)",
             "runs the handlers below under a guard"),
    Callback("recipes/node.py:_release_answered", "calls.Outcome (a release's answer)",
             "reads the answer; a refusal goes on as a failure; sets a waiting release's event"),
    Callback("recipes/node.py:_release_failed", "calls.Outcome (a release's failure)",
             "hands the failure to the worker thread; sets a waiting release's event"),
    Callback("client/kazoo_adapter/wire.py:MultiRead", "ConnectionHandler._submit, _read_response",
             "(de)serializes only; a malformed answer raises as kazoo's own records do"),
    Callback("client/kazoolog.py:KazooLog", "kazoo's logging calls (logger=)",
             "notes why an attempt failed and logs with the secrets masked"),
    Callback("client/iohandler.py:PollingHandler", "ConnectionHandler (select, async_result, event_object, "
             "dispatch_callback)", "poll(2) with kazoo's select contract; a marked watch's exception is logged"),
    Callback("recipes/queue.py:Contender.wait_steps.on_data", "ConnectionHandler._read_watch_event and "
             "KazooClient._reset_watchers (PollingHandler.dispatch_callback)",
             "sets flags and wakes its waiter (LoopWaker.set, SafeEvent.set); sends nothing: a re-arm goes to "
             "kazoo's callback thread"),
    Callback("client/kazoo_adapter/hooks.py:read_without_select._read", "ConnectionHandler._read_header (every "
             "answer)", "reads as kazoo's _read does, its socket errors reported as kazoo reports them"),
    Callback("client/interrupts.py:SafeCondition", "AsyncResult.set, inside every answer", "takes its lock in C"),
    Callback("client/interrupts.py:SafeEvent", "ConnectionHandler (its connection_closed and ping_outstanding "
             "events, from the handler's event_object)", "sets its flag under a SafeCondition"),
)
# fmt: on
