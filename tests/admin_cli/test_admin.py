"""The admin page through Django's test client: permissions, contents, escaping, errors, force-release."""

import re
import time

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from tests.support.helpers import wait_until
from tests.support.threads import hold
from zklocks import LockLost
from zklocks.admin import duration
from zklocks.models import Lock
from zklocks.ops import read_model, snapshots
from zklocks.testing import free_port

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

LIST = "/admin/zklocks/lock/"
XSS = "<script>alert(1)</script>"


def detail_url(name, alias="default"):
    info, _ = read_model.lock_info(alias, name)
    node = info.node if info else read_model.encode_name(name)
    from django.contrib.admin.utils import quote

    return reverse("admin:zklocks_lock_change", args=(quote(Lock.make_key(alias, node)),))


def release_url(name, alias="default"):
    return detail_url(name, alias).replace("/change/", "/release/")


def shown(contender):
    """A holder as the confirmation page names it: node and czxid."""
    return f"{contender.node}:{contender.token}"


def staff(*perms):
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="zklocks"))
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get(LIST)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_without_view_permission_is_refused():
    assert staff().get(LIST).status_code == 403


def test_list_shows_holder_token_and_queue_in_order(admin_client, busy_orders):
    holder, _ = busy_orders
    html = admin_client.get(LIST).content.decode()
    assert "orders:7" in html and "web-1" in html and "shop.charge" in html and "task-abc" in html
    assert str(holder.token) in html
    assert html.index("waiter-a") < html.index("waiter-b")
    assert '<td class="zk-queue-length">2</td>' in html


def test_view_permission_is_enough_to_see_but_not_to_release(busy_orders):
    client = staff("view_lock")
    assert "web-1" in client.get(LIST).content.decode()
    page = client.get(detail_url("orders:7")).content.decode()
    assert "waiter-b" in page and "Force-release" not in page
    assert client.get(release_url("orders:7")).status_code == 403
    # A crafted POST is refused as well, and the holder keeps its node.
    info, _ = read_model.lock_info("default", "orders:7")
    response = client.post(release_url("orders:7"), {"post": "yes", "holder": shown(info.holder)})
    assert response.status_code == 403
    assert read_model.lock_info("default", "orders:7")[0].holder.node == info.holder.node


def test_search_and_filters(admin_client, busy_orders):
    reader = hold("catalog", "reader", shared=True)
    try:
        assert "catalog" not in admin_client.get(LIST, {"q": "ORDERS"}).content.decode()
        assert "orders:7" in admin_client.get(LIST, {"q": "ORDERS"}).content.decode()
        shared = admin_client.get(LIST, {"kind": "shared"}).content.decode()
        assert 'data-name="catalog"' in shared and 'data-name="orders:7"' not in shared
        assert 'data-name="orders:7"' in admin_client.get(LIST, {"alias": "default"}).content.decode()
        assert 'data-name="orders:7"' not in admin_client.get(LIST, {"kind": "semaphore"}).content.decode()
        refreshing = admin_client.get(LIST, {"refresh": "5"}).content.decode()
        assert '<meta http-equiv="refresh" content="5">' in refreshing
        assert "http-equiv" not in admin_client.get(LIST).content.decode()
    finally:
        reader.release()


def test_names_and_holder_data_are_escaped(admin_client):
    t = hold(XSS, XSS)
    try:
        for url in (LIST, detail_url(XSS), release_url(XSS)):
            html = admin_client.get(url).content.decode()
            assert XSS not in html, url
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url
    finally:
        t.release()


def test_foreign_data_shown_verbatim_and_escaped(admin_client, zk_server):
    from kazoo.recipe.lock import Lock as KazooLock

    from tests.support.helpers import raw_client
    from zklocks import lock_path

    kz = raw_client(zk_server.hosts)
    try:
        lock = KazooLock(kz, lock_path("legacy"), identifier="cron@box-3 <i>")
        assert lock.acquire(timeout=5)
        html = admin_client.get(LIST).content.decode()
        assert "cron@box-3 &lt;i&gt;" in html
        lock.release()
    finally:
        kz.stop()
        kz.close()


def test_detail_page(admin_client, busy_orders):
    holder, _ = busy_orders
    html = admin_client.get(detail_url("orders:7")).content.decode()
    assert "web-1" in html and str(holder.token) in html and "task-abc" in html
    assert html.index("waiter-a") < html.index("waiter-b")
    assert "0x" in html  # the session id
    assert admin_client.get(detail_url("no-such-lock")).status_code == 200
    bogus = reverse("admin:zklocks_lock_change", args=("nothing-here",))
    assert admin_client.get(bogus).status_code == 404


def test_unreachable_alias_is_an_error_on_the_page_not_a_500(admin_client, zklocks_settings):
    zklocks_settings(
        EXTRA_ALIASES={
            "reports": {
                "HOSTS": f"127.0.0.1:{free_port()}",
                "CONNECT_TIMEOUT": 1.0,
                "AUTH": [("digest", "admin:hunter2-secret")],
            }
        }
    )
    t = hold("still-visible", "alive")
    try:
        started = time.monotonic()
        response = admin_client.get(LIST)
        took = time.monotonic() - started
        html = response.content.decode()
        assert response.status_code == 200 and took < 1.0 + 3.0
        assert "zk-alias-error" in html and "&#x27;reports&#x27;" in html
        assert "still-visible" in html
        assert "hunter2" not in html
        detail = admin_client.get(detail_url("x", alias="reports"))
        assert detail.status_code == 200 and "&#x27;reports&#x27;" in detail.content.decode()
    finally:
        t.release()


def test_release_needs_post_and_confirmation(admin_client, busy_orders):
    holder, waiters = busy_orders
    page = admin_client.get(release_url("orders:7")).content.decode()
    assert "does not stop a live holder" in page and "web-1" in page
    assert read_model.lock_info("default", "orders:7")[0].holder.thread == "web-1"  # GET changed nothing
    admin_client.post(release_url("orders:7"), {})  # a POST without the confirmation field changes nothing
    assert read_model.lock_info("default", "orders:7")[0].holder.thread == "web-1"
    assert admin_client.put(release_url("orders:7")).status_code == 405


def test_force_release_end_to_end(admin_client, busy_orders):
    holder, (first, second) = busy_orders
    info, _ = read_model.lock_info("default", "orders:7")
    response = admin_client.post(release_url("orders:7"), {"post": "yes", "holder": shown(info.holder)})
    assert response.status_code == 302
    # The next waiter gets the lock, with a higher fencing token.
    assert first.wait(10)
    assert first.token > holder.token
    # The old holder learns it through ensure_held() (one read).
    holder.release()
    assert isinstance(holder.lost, LockLost) and holder.lost.reason == "deleted"
    entry = LogEntry.objects.get()
    assert entry.object_repr == "orders:7 (default)" and info.holder.node in entry.change_message
    assert str(holder.token) in entry.change_message
    assert entry.get_admin_url() == detail_url("orders:7")
    page = admin_client.get(response["Location"]).content.decode()
    assert "Force-released" in page and "waiter-a" in page


def test_a_stale_confirmation_does_not_release_the_next_holder(admin_client, busy_orders):
    holder, (first, _) = busy_orders
    old = shown(read_model.lock_info("default", "orders:7")[0].holder)
    holder.release()
    assert first.wait(10)
    admin_client.post(release_url("orders:7"), {"post": "yes", "holder": old})
    assert read_model.lock_info("default", "orders:7")[0].holder.thread == "waiter-a"
    assert not LogEntry.objects.exists()


def test_a_post_without_holder_fields_releases_nothing_and_says_so(admin_client, busy_orders):
    holder, (first, _) = busy_orders
    response = admin_client.post(release_url("orders:7"), {"post": "yes"}, follow=True)
    assert "nothing was released" in response.content.decode()
    assert read_model.lock_info("default", "orders:7")[0].holder.thread == "web-1"
    assert not first.returned.wait(0.5)
    assert not LogEntry.objects.exists()


def test_the_confirmation_carries_the_node_and_czxid_it_showed(admin_client, busy_orders):
    info, _ = read_model.lock_info("default", "orders:7")
    page = admin_client.get(release_url("orders:7")).content.decode()
    assert f'name="holder" value="{info.holder.node}:{info.holder.token}"' in page


def test_a_holder_node_with_another_czxid_is_left_alone(admin_client, busy_orders):
    holder, (first, _) = busy_orders
    info, _ = read_model.lock_info("default", "orders:7")
    for value in (info.holder.node, f"{info.holder.node}:{info.holder.token + 1}", f"{info.holder.node}:x"):
        response = admin_client.post(release_url("orders:7"), {"post": "yes", "holder": value}, follow=True)
        assert "nothing was released" in response.content.decode()
        assert read_model.lock_info("default", "orders:7")[0].holder.thread == "web-1"
    assert not LogEntry.objects.exists()


def test_csrf_is_enforced(busy_orders):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    info, _ = read_model.lock_info("default", "orders:7")
    response = client.post(release_url("orders:7"), {"post": "yes", "holder": shown(info.holder)})
    assert response.status_code == 403
    assert read_model.lock_info("default", "orders:7")[0].holder.node == info.holder.node


def test_admin_index_lists_locks(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert LIST in html and "ZooKeeper locks" in html


def test_duration_formatting():
    assert duration(None) == "—"
    assert duration(0.25) == "250 ms"
    assert duration(12.34) == "12.3 s"
    assert duration(245) == "4 min 05 s"
    assert duration(3 * 3600 + 120) == "3 h 02 min"
    assert duration(3 * 86400 + 4 * 3600) == "3 d 4 h"


def test_semaphore_in_the_list(admin_client):
    from tests.support.threads import lease

    a = lease("pdf", 1, "pdf-a")
    assert a.wait(10)
    b = lease("pdf", 1, "pdf-b")
    try:
        wait_until(lambda: read_model.lock_info("default", "pdf")[0].waiters)
        html = admin_client.get(LIST, {"kind": "semaphore"}).content.decode()
        assert "semaphore (1)" in html and "pdf-a" in html and "pdf-b" in html
    finally:
        a.release()
        b.release()


def test_crafted_lock_keys_are_404(admin_client):
    from django.contrib.admin.utils import quote

    for key in ("default/..", "default/a/b", "nope/orders", "default/", "default/a\x01"):
        url = reverse("admin:zklocks_lock_change", args=(quote(key),))
        assert admin_client.get(url).status_code == 404, key
    assert Lock.split_key(Lock.make_key("a/b", "orders%3A1")) == ("a/b", "orders%3A1")
    with pytest.raises(ValueError, match="not a lock key"):
        Lock.split_key("default/x\ud800")


def test_detail_page_draws_holders_and_waiters_on_one_time_axis(admin_client, busy_orders):
    holder, _ = busy_orders
    page = admin_client.get(detail_url("orders:7")).content.decode()
    start = page.index('<svg class="zk-timeline"')
    svg = page[start : page.index("</svg>", start)]
    assert svg.count('class="zk-bar zk-bar-holder"') == 1
    assert svg.count('class="zk-bar zk-bar-waiter"') >= 1
    assert 'class="zk-hold"' in svg and 'class="zk-wait"' in svg
    # Coordinates are plain numbers whatever the locale (a decimal comma would break the picture).
    assert not re.search(r'(x|width)="\d+,\d', svg)


def test_timeline_geometry_is_one_axis_ending_now():
    from zklocks.ops.queue_chart import LABEL, WIDTH, picture

    def contender(queued, acquired=None):
        return snapshots.Contender(
            node="n",
            mode="exclusive",
            sequence=1,
            token=1,
            session_id=1,
            created_at=queued,
            host="h",
            pid=1,
            queued_at=queued,
            acquired_at=acquired,
        )

    lock = snapshots.LockInfo(alias="default", name="x", node="x", path="/x", kind="exclusive")
    lock.holders.append(contender(100.0, acquired=104.0))
    lock.waiters.append(contender(108.0))
    p = picture(lock, now=110.0)
    holder, waiter = p.bars
    assert p.span == 10.0
    assert holder.wait_x == LABEL and holder.hold_x == LABEL + 0.4 * WIDTH  # waited 4 s of the 10
    assert holder.hold_x + holder.hold_w == LABEL + WIDTH  # holds until now
    assert waiter.wait_x == LABEL + 0.8 * WIDTH and waiter.hold_w == 0
    assert picture(snapshots.LockInfo(alias="default", name="y", node="y", path="/y", kind=None), now=1.0) is None
