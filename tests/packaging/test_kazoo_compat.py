"""The self-check of the kazoo internals zklocks uses (zklocks.client.kazoo_adapter.compat, system check
zklocks.E060)."""

import pytest
from django.core import checks as django_checks
from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler

from zklocks import ZkConfigError, zk_lock
from zklocks.checks import check_kazoo
from zklocks.client.kazoo_adapter import compat as kazoo_compat


def _without(cls: type, name: str) -> type:
    """A copy of ``cls`` without ``name``: a kazoo that renamed or removed it."""
    return type(cls.__name__, (), {k: v for k, v in vars(cls).items() if k != name})


def test_the_installed_kazoo_passes():
    kazoo_compat.verify()  # cached: what sessions run
    kazoo_compat.verify(ConnectionHandler, KazooClient)  # computed again
    assert check_kazoo() == []


@pytest.mark.parametrize("hook", ["_submit", "_read_header", "_invoke", "_read", "_socket_error_handling"])
def test_a_connection_class_without_a_hook_is_refused(hook):
    with pytest.raises(ZkConfigError) as caught:
        kazoo_compat.verify(_without(ConnectionHandler, hook))
    message = str(caught.value)
    assert f"ConnectionHandler.{hook} is missing" in message
    assert kazoo_compat.SUPPORTED in message and "kazoo>=2.9,<2.12" in message


def test_a_hook_called_through_the_class_is_refused():
    class Inlined(ConnectionHandler):
        def _read_socket(self, read_timeout):
            # kazoo would read every answer, but a replacement on the instance would never see it
            header, buffer, offset = ConnectionHandler._read_header(self, read_timeout)
            return self._read_response(header, buffer, offset)

    with pytest.raises(ZkConfigError, match=r"Inlined\._read_socket no longer uses self\._read_header \(answers"):
        kazoo_compat.verify(Inlined)


def test_a_hook_whose_result_is_no_longer_unpacked_as_expected_is_refused():
    class OneValue(ConnectionHandler):
        def _read_socket(self, read_timeout):
            reply = self._read_header(read_timeout)
            return self._read_response(*reply)

    with pytest.raises(ZkConfigError, match=r"no longer unpacks self\._read_header\(\.\.\.\) into 3 values"):
        kazoo_compat.verify(OneValue)


def test_a_hook_with_another_signature_is_refused():
    class Wider(ConnectionHandler):
        def _submit(self, request, timeout, xid=None, priority=0):
            return super()._submit(request, timeout, xid)

    with pytest.raises(ZkConfigError, match=r"Wider\._submit has the signature .*priority=0.*, not \(self, request"):
        kazoo_compat.verify(Wider)


def test_a_client_class_without_its_queues_is_refused():
    class NoPending(KazooClient):
        def _reset(self):
            self._queue = []

    stripped = _without(_without(NoPending, "__init__"), "_call")
    with pytest.raises(ZkConfigError) as caught:
        kazoo_compat.verify(client_class=stripped)
    message = str(caught.value)
    assert "NoPending._call is missing" in message
    assert "NoPending no longer sets self._pending" in message and "self._connection" in message


@pytest.mark.zk
def test_a_refused_kazoo_starts_no_session_and_fails_the_system_check(monkeypatch):
    problem = "ConnectionHandler._invoke is missing (the lease of a new connection is settled at its handshake)"
    monkeypatch.setattr(kazoo_compat, "_verdict", [problem])
    with pytest.raises(ZkConfigError, match=r"_invoke is missing .* zklocks supports kazoo>=2\.9,<2\.12"):
        with zk_lock("compat", timeout=2):
            pass
    (error,) = [m for m in django_checks.run_checks(tags=["zklocks"]) if m.id == "zklocks.E060"]
    assert problem in error.msg and error.level == django_checks.ERROR


def test_a_request_record_with_other_fields_is_refused(monkeypatch):
    from collections import namedtuple

    from kazoo.protocol import serialization

    # A kazoo whose Delete took its version first: a delete built as Delete(path, version) would go out garbled.
    monkeypatch.setattr(serialization, "Delete", namedtuple("Delete", "version path"))
    with pytest.raises(ZkConfigError, match=r"Delete is not a record of \(path, version\)"):
        kazoo_compat.verify(ConnectionHandler, KazooClient)


def test_a_connection_without_its_wake_socket_or_a_kazoo_without_its_close_is_refused(monkeypatch):
    from kazoo.protocol import serialization

    monkeypatch.delattr(serialization, "CloseInstance")
    with pytest.raises(ZkConfigError) as caught:
        kazoo_compat.verify(_without(_without(_without(ConnectionHandler, "__init__"), "start"), "close"))
    message = str(caught.value)
    assert "ConnectionHandler no longer sets self._write_sock (the signal-safe send" in message
    assert "kazoo.protocol.serialization.CloseInstance is missing" in message


def test_a_kazoo_whose_wire_helpers_changed_is_refused():
    import struct
    import types
    from collections import namedtuple

    from kazoo.protocol import serialization

    # multiRead reads a node's stat and a count with kazoo's structs, and its answers by their opcodes. A stand-in
    # module: kazoo's own is shared with the sessions of other tests, whose multiRead reads must go on.
    wire = types.SimpleNamespace(**vars(serialization))
    wire.stat_struct = struct.Struct("!qqqqiiiqii")
    wire.GetData = type("GetData", (namedtuple("GetData", "path watcher"),), {"type": 40})
    del wire.read_string
    message = "; ".join(kazoo_compat._problems(ConnectionHandler, KazooClient, wire))
    assert "stat_struct is not a struct of '!qqqqiiiqiiq'" in message
    assert "GetData is not opcode 4" in message
    assert "kazoo.protocol.serialization.read_string is missing" in message


def test_a_connection_that_no_longer_answers_through_set_is_refused():
    class Renamed(ConnectionHandler):
        def _read_response(self, header, buffer, offset):
            return None  # a kazoo that hands answers to its results another way

    with pytest.raises(ZkConfigError) as caught:
        kazoo_compat.verify(Renamed)
    message = str(caught.value)
    assert "Renamed._read_response no longer uses .set (a release's outcome would never be told)" in message
    assert "no longer uses .deserialize" in message
    with pytest.raises(ZkConfigError, match=r"ConnectionHandler\._read_response is missing \(a release's outcome"):
        kazoo_compat.verify(_without(ConnectionHandler, "_read_response"))


def test_a_result_class_with_another_constructor_is_refused(monkeypatch):
    from kazoo.handlers import utils

    class Result(utils.AsyncResult):
        def __init__(self, handler, condition_factory, timeout_factory, name=""):
            super().__init__(handler, condition_factory, timeout_factory)

    monkeypatch.setattr(kazoo_compat, "AsyncResult", Result)
    with pytest.raises(ZkConfigError, match=r"Result\.__init__ has the signature .*name=''.*signal-safe condition"):
        kazoo_compat.verify(ConnectionHandler, KazooClient)


class _RenamedOpcodes:
    """``dis`` as a Python with other opcode names would show kazoo's bytecode: every name changed."""

    @staticmethod
    def get_instructions(code):
        import dis

        for instr in dis.get_instructions(code):
            yield instr._replace(opname="NEW_" + instr.opname)


@pytest.fixture
def unreadable_bytecode(monkeypatch):
    monkeypatch.setattr(kazoo_compat, "dis", _RenamedOpcodes)
    monkeypatch.setattr(kazoo_compat, "_readable", [])  # both caches: computed again with the patched dis,
    monkeypatch.setattr(kazoo_compat, "_verdict", [])  # then given back as they were


def test_the_bytecode_reader_reads_this_python():
    assert kazoo_compat.bytecode_readable()
    assert not [m for m in check_kazoo() if m.id == "zklocks.W063"]


def test_a_python_whose_bytecode_the_reader_misreads_checks_by_name_and_says_so(unreadable_bytecode, caplog):
    # Misread, every hook would look unused: a working kazoo refused, and every lock with it.
    assert not kazoo_compat.bytecode_readable()
    assert "zklocks.W063" in caplog.text  # what a session's verify() shows, without manage.py check
    assert kazoo_compat._problems(ConnectionHandler, KazooClient) == []
    assert [m.id for m in check_kazoo()] == ["zklocks.W063"]
    # What needs no opcode is still checked: a missing hook, and a hook its caller no longer names at all.
    with pytest.raises(ZkConfigError, match="ConnectionHandler._submit is missing"):
        kazoo_compat.verify(_without(ConnectionHandler, "_submit"))

    class Unsent(ConnectionHandler):
        def _send_ping(self, connect_timeout):
            self.ping_outstanding.set()

    with pytest.raises(ZkConfigError, match=r"_send_ping no longer uses self._submit"):
        kazoo_compat.verify(Unsent)
