import contextlib
import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

ROOT = Path(__file__).resolve().parents[2]


def spawn_worker(*args: str, secret_key: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if secret_key is not None:
        env["ZKLOCKS_TEST_SECRET_KEY"] = secret_key
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.workers", *args], cwd=ROOT, env=env, start_new_session=True
    )


def read_records(path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def assert_no_overlap(records: list[dict]) -> None:
    """Exclusive holds never overlap, and tokens strictly increase in hold order."""
    ordered = sorted(records, key=lambda r: r["start"])
    for a, b in pairwise(ordered):
        assert a["end"] <= b["start"], f"overlapping holds: {a} and {b}"
        assert a["token"] < b["token"], f"tokens not increasing: {a} then {b}"


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def run_zklocks_check(*args: str) -> tuple[list[str], str | None]:
    """``manage.py zklocks_check *args`` in this process: its lines, and the CommandError's text (None: passed)."""
    import io

    from django.core.management import CommandError, call_command

    out = io.StringIO()
    try:
        call_command("zklocks_check", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue().splitlines(), str(exc)
    return out.getvalue().splitlines(), None


def zk_settings(hosts: str, namespace: str, **options):
    """``override_settings`` with one alias, 'default', on ``hosts``: short timeouts, no reaper, and the tick of
    the suite's servers (200 ms at most), unless ``options`` say otherwise (``TICK_TIME=None``: not set, as in a
    project that leaves it out)."""
    from django.test import override_settings

    cfg = {
        "HOSTS": hosts,
        "NAMESPACE": namespace,
        "SESSION_TIMEOUT": 2.0,
        "CONNECT_TIMEOUT": 2.0,
        "REAP_INTERVAL": 0,
        "TICK_TIME": 0.2,
        **options,
    }
    if cfg["TICK_TIME"] is None:
        del cfg["TICK_TIME"]
    else:
        cfg["TICK_TIME"] = min(cfg["TICK_TIME"], cfg["SESSION_TIMEOUT"] / 2)
    return override_settings(ZKLOCKS={"default": cfg})


def project_auth() -> list[tuple[str, str]]:
    """The suite's project identity: what aliases without AUTH derive from tests/settings.py's SECRET_KEY."""
    from tests import settings
    from zklocks.identity import derived_credential

    return [("digest", derived_credential(settings.SECRET_KEY))]


def raw_client(hosts: str, *, anonymous: bool = False, **options) -> KazooClient:
    """A started kazoo client of the test's own (not a zklocks session); ``options`` go to KazooClient. It
    authenticates as the suite's project identity (it may write and delete what the suite's aliases made) unless
    ``anonymous`` or given ``auth_data``."""
    if not anonymous:
        options.setdefault("auth_data", project_auth())
    client = KazooClient(hosts=hosts, **{"timeout": 4.0, **options})
    client.start(timeout=10)
    return client


@contextlib.contextmanager
def linked_alias(zk_server, namespace: str):
    """The 'default' alias reaching ``zk_server`` through a proxy whose link faults the test sets, and an anonymous
    reader straight to the server (it sees what the server has applied): yields (proxy, reader)."""
    from zklocks.client.pools import close_all
    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    reader = raw_client(zk_server.hosts, anonymous=True)
    try:
        with zk_settings(proxy.hosts, namespace, SESSION_TIMEOUT=8.0, CONNECT_TIMEOUT=4.0):
            yield proxy, reader
    finally:
        close_all()
        reader.stop()
        reader.close()
        proxy.stop()


def tree(client: KazooClient, path: str) -> list[str]:
    """Every node below ``path`` (not ``path`` itself). A node deleted while we walk (a release landing meanwhile)
    is left out with what was below it."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    out = []
    for child in children:
        full = f"{path}/{child}"
        out.append(full)
        out.extend(tree(client, full))
    return out
