"""TLS between zklocks and ZooKeeper: Debian's ZooKeeper 3.8 with the Netty connection factory and a PKCS12
keystore on a secure client port; kazoo's ``use_ssl`` options passed through ``OPTIONS``."""

import io
import logging
import subprocess
import threading
import time
import uuid

import pytest
from django.core import checks
from django.core.management import call_command
from django.test import override_settings

from zklocks import ZkUnavailable, zk_lock
from zklocks.client.pools import close_all
from zklocks.testing import ZkServer, free_port

PASSWORD = "changeit"
SAN = """[req]
distinguished_name=dn
[dn]
[ext]
subjectAltName=IP:127.0.0.1,DNS:localhost
basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth,clientAuth
"""


def sh(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d, name="ca"):
    """A CA, a server and a client certificate signed by it (PEM), the server's PKCS12 keystore and a
    PKCS12 truststore with the CA, for ZooKeeper."""
    (d / "san.cnf").write_text(SAN)
    sh(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN=zklocks-test-{name}",
        cwd=d,
    )
    for who in ("server", "client"):
        sh(
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            "-subj",
            f"/CN={who}",
            cwd=d,
        )
        sh(
            "openssl",
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            f"{name}.pem",
            "-CAkey",
            f"{name}.key",
            "-CAcreateserial",
            "-out",
            f"{who}.pem",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-extensions",
            "ext",
            cwd=d,
        )
    sh(
        "openssl",
        "pkcs12",
        "-export",
        "-in",
        "server.pem",
        "-inkey",
        "server.key",
        "-out",
        "server.p12",
        "-passout",
        f"pass:{PASSWORD}",
        "-name",
        "server",
        cwd=d,
    )
    sh(
        "keytool",
        "-importcert",
        "-noprompt",
        "-alias",
        "ca",
        "-file",
        f"{name}.pem",
        "-keystore",
        "trust.p12",
        "-storetype",
        "PKCS12",
        "-storepass",
        PASSWORD,
        cwd=d,
    )
    return d


@pytest.fixture(scope="module")
def tls_zk(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    port = free_port()
    server = ZkServer(
        extra={
            "secureClientPort": str(port),
            "secureClientPortAddress": "127.0.0.1",
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": str(pki / "server.p12"),
            "ssl.keyStore.password": PASSWORD,
            "ssl.keyStore.type": "PKCS12",
            "ssl.trustStore.location": str(pki / "trust.p12"),
            "ssl.trustStore.password": PASSWORD,
            "ssl.trustStore.type": "PKCS12",
        }
    )
    try:
        server.start()
        yield f"127.0.0.1:{port}", pki
    finally:
        server.cleanup()


def run_check():
    out = io.StringIO()
    call_command("zklocks_check", stdout=out)
    return out.getvalue().splitlines()


def tls_options(pki, ca="ca.pem"):
    return {
        "use_ssl": True,
        "verify_certs": True,
        "ca": str(pki / ca),
        "certfile": str(pki / "client.pem"),
        "keyfile": str(pki / "client.key"),
    }


def settings_for(hosts, **extra):
    return override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": f"/tls-{uuid.uuid4().hex[:8]}/locks",  # a parent of its own: the audit checks it
                "SESSION_TIMEOUT": 2.0,
                "CONNECT_TIMEOUT": 2.0,
                "REAP_INTERVAL": 0,
                **extra,
            }
        }
    )


def test_locks_work_over_tls_with_options(tls_zk):
    hosts, pki = tls_zk
    with settings_for(hosts, OPTIONS=tls_options(pki), AUTH=[("digest", "app:s3cret")]):
        try:
            with zk_lock("over-tls") as lock:
                assert lock.token > 0
                box = {}
                t = threading.Thread(
                    target=lambda: box.setdefault("got", zk_lock("over-tls", blocking=False).acquire())
                )
                t.start()
                t.join(10)
                assert box["got"] is False  # a second session over TLS sees the holder
            lines = run_check()  # raises CommandError on any problem
            assert lines[0] == f"default: ok connected to {hosts} (session timeout 2s)"
        finally:
            close_all()


def test_plaintext_client_on_the_tls_port_is_unavailable_not_a_hang(tls_zk):
    hosts, _ = tls_zk
    with settings_for(hosts):
        started = time.monotonic()
        with pytest.raises(ZkUnavailable, match="alias 'default'"):
            zk_lock("plain").acquire(timeout=None)
        assert time.monotonic() - started < 3.0
    close_all()


def test_a_server_certificate_from_another_ca_is_refused(tls_zk, tmp_path):
    hosts, pki = tls_zk
    other = make_pki(tmp_path, name="other")
    options = {**tls_options(pki), "ca": str(other / "other.pem")}
    with settings_for(hosts, OPTIONS=options):
        started = time.monotonic()
        with pytest.raises(ZkUnavailable, match=f"alias 'default'.*: {hosts}: TLS: .*CERTIFICATE_VERIFY_FAILED"):
            zk_lock("mitm").acquire(timeout=None)
        assert time.monotonic() - started < 3.0
    close_all()


def test_the_server_asks_for_a_client_certificate(tls_zk):
    hosts, pki = tls_zk
    options = {key: value for key, value in tls_options(pki).items() if key not in ("certfile", "keyfile")}
    with settings_for(hosts, OPTIONS=options):
        with pytest.raises(ZkUnavailable, match="alias 'default'"):
            zk_lock("anonymous-tls").acquire(timeout=None)
    close_all()


IMPOSTOR_SAN = """[req]
distinguished_name=dn
[dn]
[ext]
subjectAltName=DNS:evil.example
basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth,clientAuth
"""


@pytest.fixture(scope="module")
def impostor_zk(tls_zk):
    """A server whose certificate comes from the same CA but names another host (evil.example)."""
    _, pki = tls_zk
    (pki / "impostor.cnf").write_text(IMPOSTOR_SAN)
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "evil.key", "-out", "evil.csr", "-subj",
       "/CN=evil.example", cwd=pki)  # fmt: skip
    sh("openssl", "x509", "-req", "-in", "evil.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
       "evil.pem", "-days", "2", "-extfile", "impostor.cnf", "-extensions", "ext", cwd=pki)  # fmt: skip
    sh("openssl", "pkcs12", "-export", "-in", "evil.pem", "-inkey", "evil.key", "-out", "evil.p12", "-passout",
       f"pass:{PASSWORD}", "-name", "server", cwd=pki)  # fmt: skip
    port = free_port()
    server = ZkServer(
        extra={
            "secureClientPort": str(port),
            "secureClientPortAddress": "127.0.0.1",
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": str(pki / "evil.p12"),
            "ssl.keyStore.password": PASSWORD,
            "ssl.keyStore.type": "PKCS12",
            "ssl.trustStore.location": str(pki / "trust.p12"),
            "ssl.trustStore.password": PASSWORD,
            "ssl.trustStore.type": "PKCS12",
        }
    )
    try:
        server.start()
        yield f"127.0.0.1:{port}", pki
    finally:
        server.cleanup()


def test_an_impostor_with_a_certificate_of_the_same_ca_never_sees_the_password(impostor_zk, caplog):
    hosts, pki = impostor_zk
    caplog.set_level(logging.DEBUG, logger="zklocks.kazoo")
    with settings_for(hosts, OPTIONS=tls_options(pki), AUTH=[("digest", "app:s3cret")]):
        with pytest.raises(ZkUnavailable, match="alias 'default'.*TLS: .*(?i:hostname|IP address mismatch)"):
            zk_lock("impostor").acquire(timeout=None)
    close_all()
    sent = [r.getMessage() for r in caplog.records if "Sending request" in r.getMessage()]
    assert not [m for m in sent if "Auth(" in m], sent  # the handshake failed before any request


def test_turning_hostname_checks_off_is_possible_and_warned_about(impostor_zk):
    hosts, pki = impostor_zk
    options = {**tls_options(pki), "check_hostname": False}
    with settings_for(hosts, OPTIONS=options):
        try:
            with zk_lock("impostor-allowed") as lock:  # the impostor is trusted: this is what the default prevents
                assert lock.token > 0
        finally:
            close_all()
        ids = [m.id for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]
        assert "zklocks.W060" in ids


@pytest.mark.parametrize("value", [0, None, ""])
def test_a_falsy_hostname_check_that_is_not_false_is_refused(value):
    """0, None or "" would turn the check off without a word: the alias is refused (E061), never used that way."""
    from zklocks import conf

    options = {"use_ssl": True, "check_hostname": value}
    configs, problems = conf.validate({"default": {"HOSTS": "zk1:2181", "OPTIONS": options}}, keys=("k",))
    assert "default" not in configs
    assert [p.id for p in problems] == ["zklocks.E061"]
    assert repr(value) in problems[0].msg
