"""A holder cut off from the whole ensemble by a TCP proxy: it gives the lock up within the session timeout, the
lock passes on only after that, and the resource refuses the stale holder's token."""

import threading
import time

import pytest
from django.db import connection
from django.test import override_settings

from tests.support.app.models import Stock
from tests.support.helpers import wait_until
from zklocks import signals, zk_lock
from zklocks.client.pools import close_all, connections
from zklocks.fencing import FencedQuerySet, StaleToken
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)


def stock():
    return FencedQuerySet(model=Stock)


@pytest.fixture
def cut_off(zk_ensemble):
    """Settings with two aliases on one namespace: 'default' talks to the ensemble directly, 'cut' through a
    proxy per server that the test can partition."""
    proxies = [TcpProxy("127.0.0.1", s.port).start() for s in zk_ensemble.servers]
    common = {"NAMESPACE": "/partition", "SESSION_TIMEOUT": 2.0, "CONNECT_TIMEOUT": 2.0, "REAP_INTERVAL": 0}
    with override_settings(
        ZKLOCKS={
            "default": {"HOSTS": zk_ensemble.hosts, **common},
            "cut": {"HOSTS": ",".join(p.hosts for p in proxies), **common},
        }
    ):
        try:
            yield proxies
        finally:
            for p in proxies:
                p.stop()
            close_all()


def test_partitioned_holder_gives_up_before_the_lock_passes_and_its_stale_write_is_refused(cut_off):
    row = Stock.objects.create(quantity=10)
    lost = []
    signals.lock_lost.connect(lambda sender, **kw: lost.append(kw), weak=False, dispatch_uid="partition-test")

    old = zk_lock("account:1", using="cut")
    old.acquire()
    old_token = old.token
    assert stock().filter(pk=row.pk).update_if_token(old_token, quantity=9) == 1
    timeout = connections["cut"].session().timeout

    got = {}
    release_new = threading.Event()

    def contender():
        with zk_lock("account:1", timeout=20) as new:
            got["at"] = time.monotonic()
            got["token"] = new.token
            got["written"] = stock().filter(pk=row.pk).update_if_token(new.token, quantity=5)
            release_new.wait(20)
        connection.close()

    t = threading.Thread(target=contender)
    t.start()
    try:
        time.sleep(0.3)
        assert "at" not in got  # queued behind the holder

        for p in cut_off:
            p.partition()
        cut_at = time.monotonic()
        wait_until(lambda: not old.is_held, timeout=timeout + 1, interval=0.005)
        gave_up = time.monotonic()
        assert "at" not in got, "the lock passed on while the old holder still believed it held it"
        assert gave_up - cut_at <= timeout  # within the session timeout

        wait_until(lambda: "written" in got, timeout=timeout + 5)
        assert got["at"] > gave_up
        assert got["token"] > old_token
        assert got["written"] == 1

        # The old holder wakes up late and writes with its token: the resource refuses it.
        assert stock().filter(pk=row.pk).update_if_token(old_token, quantity=0) == 0
        with pytest.raises(StaleToken, match=f"token {old_token} is stale"):
            stock().filter(pk=row.pk).update_or_reject(old_token, quantity=0)
        row.refresh_from_db()
        assert (row.quantity, row.fence) == (5, got["token"])

        wait_until(lambda: lost, timeout=5)
        assert lost[0]["name"] == "account:1" and lost[0]["alias"] == "cut" and lost[0]["reason"] == "suspended"
        for p in cut_off:
            p.heal()
        old.release()  # never raises, and never touches the new holder's node
        assert zk_lock("account:1", blocking=False).acquire() is False
    finally:
        release_new.set()
        t.join(20)
        signals.lock_lost.disconnect(dispatch_uid="partition-test")


def test_fenced_queryset_accepts_equal_and_higher_tokens_only():
    a = Stock.objects.create(quantity=1)
    b = Stock.objects.create(quantity=1)
    both = stock().filter(pk__in=[a.pk, b.pk])
    assert both.update_if_token(7, quantity=2) == 2
    assert both.update_if_token(7, quantity=3) == 2  # the same holder writes again
    assert stock().filter(pk=a.pk).update_if_token(9, quantity=4) == 1
    # a has seen 9: a holder with 8 may write b only, and update_or_reject writes nothing at all.
    assert both.update_if_token(8, quantity=5) == 1
    with pytest.raises(StaleToken):
        both.update_or_reject(8, quantity=6)
    assert sorted(Stock.objects.filter(pk__in=[a.pk, b.pk]).values_list("quantity", "fence")) == [(4, 9), (5, 8)]
    assert both.update_or_reject(9, quantity=7) == 2
    for bad in (-1, "9", None, True):
        with pytest.raises(ValueError, match="a fencing token is a non-negative int"):
            both.update_if_token(bad, quantity=1)
    with pytest.raises(ValueError, match="fence column"):
        both.update_if_token(10, fence=11)
