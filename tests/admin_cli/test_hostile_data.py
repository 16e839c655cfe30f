"""Hostile namespace content (docs/security.md, "Names and the admin"): without AUTH anyone may write nodes into the
namespace. The admin list and detail pages answer 200 within 2 s whatever they read, show a bad field as
"invalid", keep the alias's other locks, and stay bounded in size; the deadlock banner stays bounded for a forged
wait-for graph; the health check with MAX_HOLD_SECONDS fails when the locks cannot be read."""

import asyncio
import json
import time

import pytest
from django.contrib.admin.utils import quote
from django.test import override_settings
from django.urls import reverse
from kazoo.security import ACL, Id, Permissions

from tests.support.threads import hold
from zklocks import conf, zk_lock
from zklocks.health import ZooKeeperHealthCheck
from zklocks.models import Lock
from zklocks.names import encode_name

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

LIST = "/admin/zklocks/lock/"
FAST = 2.0  # seconds a page may take, whatever the namespace holds
PAGE_BYTES = 1_000_000


def ours(**fields) -> bytes:
    """Node data as a zklocks contender writes it, with ``fields`` put in (raw JSON text for a value)."""
    base = {"v": 1, "marks": "release", "host": "web-1", "pid": 4242, "thread": "forged", "queued_at": 1.0}
    text = json.dumps(base, separators=(",", ":"))[:-1]
    for key, value in fields.items():
        text += f',"{key}":{value}'
    return (text + "}").encode()


# lock name -> the holder node's data; the ones marked True must show "invalid" (a field of ours with a bad value)
HOSTILE = {
    "acquired-1e300": (ours(acquired_at="1e300"), True),
    "acquired-1e999": (ours(acquired_at="1e999"), True),
    "acquired-nan": (ours(acquired_at="NaN"), True),
    "queued-400-digits": (ours(queued_at="9" * 400), True),
    "acquired-400-digits": (ours(acquired_at="9" * 400), True),
    "pid-400-digits": (ours(pid="9" * 400), True),
    "raw-not-a-string": (ours(raw='{"a":[1,2,3]}'), True),
    "thread-not-a-string": (ours(thread="[1,2]"), True),
    "deep-nesting": (b"[" * 100_000, False),
    "deep-object": (b'{"v":1,"host":' + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b"}", False),
    "huge-data": (b"x" * 900_000, False),
    "not-utf8": (b"\xff\xfe" * 100, False),
}


def lock_node(name: str) -> str:
    return f"{conf.alias_config().namespace}/{encode_name(name)}"


def forge(kz, name: str, data: bytes) -> str:
    """A contender node of ``name`` written by an anonymous raw client, as a queue entry of the kazoo layout."""
    return kz.create(f"{lock_node(name)}/forged__lock__", data, ephemeral=True, sequence=True, makepath=True)


def detail_url(name: str) -> str:
    return reverse("admin:zklocks_lock_change", args=(quote(Lock.make_key("default", encode_name(name))),))


def bulk_lock_nodes(kz, count: int) -> None:
    """Lock nodes bulk-000 on, with nobody in them, in one transaction."""
    ns = conf.alias_config().namespace
    kz.ensure_path(ns)
    transaction = kz.transaction()
    for i in range(count):
        transaction.create(f"{ns}/bulk-{i:03d}")
    assert all(r is True or isinstance(r, str) for r in transaction.commit())


def timed_get(client, url, **params):
    """The response and the faster of up to two tries: a 2-core machine busy with other servers can stall one
    request past FAST, while unbounded work (56 s for 81 forged nodes before the bound) is slow every time."""
    best = None
    for _ in range(2):
        started = time.monotonic()
        response = client.get(url, params)
        took = time.monotonic() - started
        best = took if best is None else min(best, took)
        if best < FAST:
            break
    return response, best


@pytest.mark.parametrize("name", list(HOSTILE))
def test_one_hostile_node(admin_client, kz, name):
    data, marked = HOSTILE[name]
    alive = hold("still-here", "alive")
    try:
        forge(kz, name, data)
        response, took = timed_get(admin_client, LIST)
        html = response.content.decode()
        assert response.status_code == 200 and took < FAST, took
        assert len(response.content) < PAGE_BYTES
        assert "zk-alias-error" not in html  # one node does not blank the alias
        assert 'data-name="still-here"' in html and "alive" in html and f'data-name="{name}"' in html
        assert ("invalid: " in html) == marked
        response, took = timed_get(admin_client, detail_url(name))
        page = response.content.decode()
        assert response.status_code == 200 and took < FAST, took
        assert len(response.content) < PAGE_BYTES
        assert "zk-alias-error" not in page and "zk-holder-row" in page
        assert ("invalid: " in page) == marked
    finally:
        alive.release()


def test_all_of_them_at_once(admin_client, kz):
    for name, (data, _) in HOSTILE.items():
        forge(kz, name, data)
    response, took = timed_get(admin_client, LIST)
    html = response.content.decode()
    assert response.status_code == 200 and took < FAST, took
    assert len(response.content) < PAGE_BYTES
    assert all(f'data-name="{name}"' in html for name in HOSTILE)
    assert "invalid: acquired_at" in html and "invalid: raw" in html and "invalid: pid" in html


def test_the_list_is_paginated(admin_client, kz):
    bulk_lock_nodes(kz, 250)
    response, took = timed_get(admin_client, LIST)
    html = response.content.decode()
    assert response.status_code == 200 and took < FAST
    assert html.count('<tr class="zk-lock"') == 100 and "page 1 of 3" in html
    assert 'data-name="bulk-000"' in html and 'data-name="bulk-100"' not in html
    last = admin_client.get(LIST, {"p": "3"}).content.decode()
    assert last.count('<tr class="zk-lock"') == 50 and 'data-name="bulk-249"' in last
    assert admin_client.get(LIST, {"p": "junk"}).status_code == 200  # a bad page number is the first page
    searched = admin_client.get(LIST, {"q": "bulk-24"}).content.decode()
    assert searched.count('<tr class="zk-lock"') == 10 and "page 1 of" not in searched


def test_a_forged_wait_for_graph_gives_a_bounded_banner(admin_client, kz):
    """81 forged nodes: 9 actors, each holding one lock and waiting for the 8 others (every cycle of 9 actors)."""
    actors = range(9)

    def data(actor: int) -> bytes:
        return ours(owner=str(actor), ident="1", thread=json.dumps(f"t{actor}"))

    for lock in actors:
        forge(kz, f"ring/{lock}", data(lock))  # the holder: first in the queue
        for actor in actors:
            if actor != lock:
                forge(kz, f"ring/{lock}", data(actor))
    response, took = timed_get(admin_client, LIST)
    html = response.content.decode()
    assert response.status_code == 200 and took < FAST, took
    assert len(response.content) < PAGE_BYTES
    assert 0 < html.count('class="error zk-deadlock"') <= 20
    assert "zk-deadlock-truncated" in html and "9 actors in 1 group wait for each other" in html


def test_health_fails_when_the_locks_cannot_be_read(kz):
    """The namespace lets zklocks create lock nodes but not list them (no READ): the probe passes, the snapshot
    has an error, and a lock held too long would go unseen."""
    ns = conf.alias_config().namespace
    no_read = Permissions.ALL & ~Permissions.READ
    kz.create(ns, makepath=True, acl=[ACL(no_read, Id("world", "anyone"))])
    try:
        with override_settings(ZKLOCKS_HEALTH={"MAX_HOLD_SECONDS": 0.5}):
            with zk_lock("nightly/report"):
                time.sleep(1.0)
                result = asyncio.run(ZooKeeperHealthCheck().get_result())
        assert result.error is not None
        text = str(result.error)
        assert "'default'" in text and "MAX_HOLD_SECONDS" in text and "(NoAuth)" in text, text
    finally:
        kz.set_acls(ns, [ACL(Permissions.ALL, Id("world", "anyone"))])


def test_a_foreign_name_cannot_pose_as_another_lock(admin_client, kz):
    """A lock node made by another client may be named with bidi controls or a line separator, which zklocks'
    own names refuse: the list, the detail page and zklocks_status show them as visible escapes."""
    import io

    from django.core.management import call_command

    ns = conf.alias_config().namespace
    posing = "invoice-\u202efdp.exe"  # displays as "invoice-exe.pdf"
    kz.create(f"{ns}/{posing}/forged__lock__", ours(), ephemeral=True, sequence=True, makepath=True)
    kz.create(f"{ns}/split\u2028line", makepath=True)
    html = admin_client.get(LIST).content.decode()
    assert "\u202e" not in html.replace(f'data-name="{posing}"', "") and "\u2028" not in html.replace(
        'data-name="split\u2028line"', ""
    )
    assert "invoice-\\u202efdp.exe" in html and "split\\u2028line" in html
    page = admin_client.get(detail_url(posing)).content.decode()
    assert "\u202e" not in page and "invoice-\\u202efdp.exe" in page
    out = io.StringIO()
    call_command("zklocks_status", stdout=out)
    assert "\u202e" not in out.getvalue() and "\u2028" not in out.getvalue()
    assert "invoice-\\u202efdp.exe" in out.getvalue()
    # --json too: the same characters as JSON escapes, which a JSON reader turns back into the real names.
    out = io.StringIO()
    call_command("zklocks_status", "--json", stdout=out)
    assert "\u202e" not in out.getvalue() and "\u2028" not in out.getvalue()
    assert {posing, "split\u2028line"} <= {
        lock["name"] for a in json.loads(out.getvalue())["aliases"] for lock in a["locks"]
    }


def test_a_lone_surrogate_in_holder_data_is_shown_escaped_and_the_commands_still_print(kz):
    """JSON node data may spell a lone surrogate (``"\\ud800"``), which no UTF-8 stream can carry: the table and
    ``--json`` show it escaped instead of failing to print (UnicodeEncodeError on a real terminal)."""
    import io

    from django.core.management import call_command

    ns = conf.alias_config().namespace
    data = ours(host='"web\\ud800-1"')
    kz.create(f"{ns}/surrogate/forged__lock__", data, ephemeral=True, sequence=True, makepath=True)
    for args in [(), ("--json",)]:
        out = io.StringIO()
        call_command("zklocks_status", *args, stdout=out)
        out.getvalue().encode("utf-8")  # raises on a lone surrogate
        assert "web\\ud800-1" in out.getvalue(), out.getvalue()


def test_above_the_full_read_limit_a_page_reads_only_its_own_locks(admin_client, kz, monkeypatch):
    """A namespace of more lock nodes than FULL_READ_LIMIT (100,000 forged ones, say): the list reads the names,
    then only the locks of the page it shows, and says so."""
    from zklocks.ops import read_model

    monkeypatch.setattr(read_model, "FULL_READ_LIMIT", 50)
    reads = []
    real = read_model.read_locks
    monkeypatch.setattr(
        read_model, "read_locks", lambda wanted, listed: reads.append(len(wanted)) or real(wanted, listed)
    )
    bulk_lock_nodes(kz, 119)
    held = hold("bulk-zz-held", "holder-thread")
    try:
        first = admin_client.get(LIST).content.decode()
        assert reads == [100] and first.count('<tr class="zk-lock"') == 100
        assert "120 lock nodes, more than 50" in first and "page 1 of 2" in first
        last = admin_client.get(LIST, {"p": "2"}).content.decode()
        assert reads == [100, 20] and last.count('<tr class="zk-lock"') == 20
        row = last[last.index('data-name="bulk-zz-held"') :]
        assert "holder-thread" in row[: row.index("</tr>")]
        searched = admin_client.get(LIST, {"q": "zz"}).content.decode()
        assert reads[-1] == 1 and searched.count('<tr class="zk-lock"') == 1
        # the kind filter is off, and not shown as if it applied
        kinded = admin_client.get(LIST, {"kind": "exclusive"}).content.decode()
        assert 'data-filter-title="kind"' not in kinded and "kind=exclusive" not in kinded
        assert kinded.count('<tr class="zk-lock"') == 100
    finally:
        held.release()


def test_the_force_release_page_shows_a_page_of_holders_and_releases_those(admin_client, kz):
    """150 readers hold a shared lock: the confirmation lists 100, the next page the other 50, and confirming a
    page deletes only the holders it showed."""
    import re

    for _ in range(150):
        forge_reader = f"{lock_node('many-readers')}/forged__rlock__"
        kz.create(forge_reader, ours(), ephemeral=True, sequence=True, makepath=True)
    url = detail_url("many-readers").replace("/change/", "/release/")
    first = admin_client.get(url).content.decode()
    assert first.count('name="holder"') == 100 and "these 100 of its 150 holders" in first
    second = admin_client.get(url, {"p": "2"}).content.decode()
    shown_there = re.findall(r'name="holder" value="([^"]+)"', second)
    assert len(shown_there) == 50 and "holders 101–150 of 150" in second
    response = admin_client.post(url, {"post": "yes", "holder": shown_there})
    assert response.status_code == 302
    assert len(kz.get_children(lock_node("many-readers"))) == 100


def test_a_forged_node_that_the_queue_puts_first_is_the_one_shown_and_released(kz):
    """A node with a negative suffix sorts before every real one in the recipe's order, so it holds up the queue:
    readers show it as the holder (not the contender waiting behind it), and zklocks_release deletes it, never
    that waiter."""
    import io

    from django.core.management import call_command

    from tests.support.threads import HeldInThread
    from zklocks.ops import read_model

    forged = f"{lock_node('neg-first')}/forged__lock__-2147483648"
    kz.create(forged, ours(host='"forger"'), makepath=True)
    waiter = HeldInThread(zk_lock("neg-first", timeout=30), name="real-contender", wait_for_acquire=False)
    try:
        time.sleep(1.0)
        assert not waiter.acquired  # the recipe keeps it behind the forged node
        info, _ = read_model.lock_info("default", "neg-first")
        assert [c.host for c in info.holders] == ["forger"], info.holders
        assert [c.thread for c in info.waiters] == ["real-contender"], info.waiters
        call_command("zklocks_release", "neg-first", "--yes", stdout=io.StringIO())
        assert not kz.exists(forged)
        assert waiter.wait(10), waiter.error  # the real contender holds once the blocker is gone
    finally:
        waiter.release()


def test_a_node_forged_before_a_real_holder_with_a_higher_suffix_does_not_take_its_place(kz):
    """An old forged node that sorts after the holder is older than it, yet blocks nothing: the real holder is
    shown, and zklocks_release would free it, not the forged node."""
    from zklocks.ops import read_model

    kz.create(f"{lock_node('older-forged')}/zzzz__lock__0000009999", ours(host='"forger"'), makepath=True)
    real = hold("older-forged", "real-holder")
    try:
        info, _ = read_model.lock_info("default", "older-forged")
        assert [c.thread for c in info.holders] == ["real-holder"], info.holders
        assert [c.host for c in info.waiters] == ["forger"], info.waiters
    finally:
        real.release()


def test_bidi_characters_in_foreign_names_are_shown_escaped_on_every_admin_page(admin_client, kz):
    """The deadlock banner, the detail page (the lock's path, its contenders' nodes) and the force-release page
    (its title, the lock's name, the nodes): a foreign node name shows U+202E as a visible escape, never raw. The
    release form posts the raw node name back (a hidden field), which is not shown."""
    from zklocks.models import Lock

    namespace = conf.alias_config().namespace
    first, second = "%E2%80%AEfdp", "%E2%80%AEcod"  # lock nodes that decode to "\u202efdp" and "\u202ecod"
    for node, holder, waiter in ((first, 1, 2), (second, 2, 1)):
        for owner in (holder, waiter):
            path = f"{namespace}/{node}/x__lock__"
            kz.create(path, ours(owner=str(owner)), ephemeral=True, sequence=True, makepath=True)
    page = admin_client.get(LIST).content.decode()
    banner = page[page.index("zk-deadlock") :]
    banner = banner[: banner.index("</ul>")]
    assert "\u202e" not in banner and "\\u202e" in banner, banner[:400]

    posing = "invoice-\u202efdp.exe"
    kz.create(f"{namespace}/{posing}/\u202eforged__lock__", ours(), ephemeral=True, sequence=True, makepath=True)
    key = quote(Lock.make_key("default", posing))
    detail = admin_client.get(reverse("admin:zklocks_lock_change", args=(key,))).content.decode()
    release = admin_client.get(reverse("admin:zklocks_lock_release", args=(key,))).content.decode()
    assert "forged__lock__" in detail and "\u202e" not in detail
    assert "forged__lock__" in release and "\u202e" not in release.replace('value="\u202eforged', "")


def test_nodes_this_alias_may_not_read_are_named_and_hide_no_other_lock(admin_client, kz):
    """Anyone who may create in the namespace can give a node an ACL that denies this alias READ: a lock node, or
    a contender in a lock node of ours. The page names them and shows every other lock (before: the whole alias
    was an error, "ZooKeeper refused to list <namespace>", though the namespace itself could be listed)."""
    from kazoo.security import make_digest_acl

    foreign = [make_digest_acl("someone", "else", all=True)]
    alive = hold("still-here", "alive")
    try:
        kz.create(lock_node("walled-lock"), b"", acl=foreign, makepath=True)
        kz.ensure_path(lock_node("walled-holder"))
        kz.create(f"{lock_node('walled-holder')}/forged__lock__", b"{}", acl=foreign, ephemeral=True, sequence=True)
        kz.create(f"{lock_node('walled-holder')}/x__lock__", ours(), ephemeral=True, sequence=True)  # a waiter
        response, took = timed_get(admin_client, LIST)
        html = response.content.decode()
        assert response.status_code == 200 and took < FAST, took
        assert "zk-alias-error" not in html
        assert 'data-name="still-here"' in html and "alive" in html
        # Not shown with its waiter as the holder, which a force-release would then delete.
        assert 'data-name="walled-holder"' not in html
        walled = [line for line in html.splitlines() if "may not read it (NoAuth)" in line]
        assert any("walled-lock" in line for line in walled), walled
        assert any("walled-holder" in line for line in walled), walled
        with override_settings(ZKLOCKS_HEALTH={"MAX_HOLD_SECONDS": 3600}):  # locks there go unchecked: it says so
            result = asyncio.run(ZooKeeperHealthCheck().get_result())
        assert result.error is not None and "may not read them" in str(result.error), result.error
    finally:
        alive.release()


def test_bidi_characters_in_foreign_node_data_are_shown_escaped_in_the_list_and_the_timeline(admin_client, kz):
    """A holder's and a waiter's node data (host, thread, task, or data that is not ours at all) with U+202E: the
    list and the detail page's timeline show it as a visible escape, never raw."""
    forge(
        kz,
        "bidi-data",
        ours(host='"\\u202eweb"', thread='"\\u202et"', task_name='"\\u202etask"', task_id='"\\u202eid"'),
    )
    forge(kz, "bidi-data", "\u202enot json".encode())
    for url in (LIST, detail_url("bidi-data")):
        page = admin_client.get(url).content.decode()
        assert 'data-name="bidi-data"' in page or "bidi-data" in page
        assert "\u202e" not in page, page[page.index("\u202e") - 200 : page.index("\u202e") + 50]
        assert "\\u202e" in page
