"""No secret in any log, at any level: kazoo logs every request it sends at DEBUG, the Auth packet (with the
digest password) and the Connect request (with the session password) among them, again on every reconnect."""

import base64
import logging

import pytest

from tests.support.helpers import zk_settings
from zklocks import zk_lock
from zklocks.client.kazoolog import KazooLog
from zklocks.client.pools import close_all, connections
from zklocks.testing.proxy import TcpProxy

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

PASSWORD = "Top-Secret-4711"


def test_scrub_hides_auth_and_session_passwords():
    scrub = KazooLog(secrets=[f"app:{PASSWORD}"]).scrub
    assert scrub("Sending request(xid=%s): %s", (1, f"Auth(type=0, scheme='digest', auth='app:{PASSWORD}')")) == (
        "Sending request(xid=1): Auth(type=0, scheme='digest', auth=<hidden>)"
    )
    connect = "Connect(protocol_version=0, session_id=7, passwd=b'\\x01\\x02q\\'x', read_only=None)"
    assert scrub("%s", (connect,)) == "Connect(protocol_version=0, session_id=7, passwd=<hidden>, read_only=None)"
    assert PASSWORD not in scrub("odd line mentioning %s", (PASSWORD,))
    # kazoo's own INFO line, with the session password in hex
    line = "Session created, session_id: %r session_passwd: %s\n negotiated session timeout: %s"
    created = scrub(line, (7, "00ff17", 4))
    assert "00ff17" not in created and "session_passwd: <hidden>" in created
    for form in encodings(PASSWORD.encode()):
        assert form not in scrub("encoded %s", (form,))


def test_no_record_at_any_level_carries_a_password(zk_server, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, every level
    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    try:
        with zk_settings(proxy.hosts, "/secrets", AUTH=[("digest", f"app:{PASSWORD}")], SESSION_TIMEOUT=4.0):
            try:
                with zk_lock("secret-keeper"):
                    pass
                session = connections["default"].session()
                session_password = session.client.client_id[1]
                proxy.reset()  # a reconnect sends Connect and Auth again
                with zk_lock("secret-keeper", timeout=5):
                    pass
                assert session.client.client_id[1] == session_password  # the same session, reconnected
            finally:
                close_all()
    finally:
        proxy.stop()
    messages = [record.getMessage() for record in caplog.records]
    assert any("Auth(" in m for m in messages), "kazoo's DEBUG lines were not captured"
    assert sum("Connect(" in m for m in messages) >= 2, "no reconnect was logged"
    assert any("Session created" in m for m in messages), "kazoo's session line was not captured"
    forms = [PASSWORD, repr(session_password)[2:-1], *encodings(PASSWORD.encode()), *encodings(session_password)]
    leaks = [m for m in messages for form in forms if form in m or form.upper() in m]
    assert not leaks, leaks


def encodings(secret: bytes) -> list[str]:
    """The encodings a log line might carry a secret in: hex (kazoo logs the session password so) and base64."""
    return [secret.hex(), base64.b64encode(secret).decode().rstrip("="), base64.urlsafe_b64encode(secret).decode()]


def test_a_short_credential_does_not_blank_ordinary_digits():
    scrub = KazooLog(secrets=["ip:7"]).scrub  # 2 hex digits, "37", would otherwise go from every line
    assert scrub("zxid %s", ("0x370000001",)) == "zxid 0x370000001"
