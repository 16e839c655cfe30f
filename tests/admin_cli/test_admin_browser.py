"""The admin page in a real headless Chromium against a live server: log in, read, search, force-release."""

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.support.browser import chromium_page
from tests.support.helpers import wait_until
from tests.support.threads import hold, queue_behind
from zklocks import LockLost
from zklocks.ops import read_model

pytestmark = [pytest.mark.zk, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<script>alert(1)</script>"


@pytest.fixture
def allow_orm_beside_playwright(monkeypatch):
    # Playwright's sync API keeps an event loop in this thread; our ORM calls here are plain blocking calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def login(page, base):
    page.goto(base + "/admin/zklocks/lock/")
    assert "/admin/login/" in page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-for-browser")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/zklocks/lock/")


def test_admin_in_a_browser(live_server, allow_orm_beside_playwright, tmp_path):
    User.objects.create_superuser("admin", password="pw-for-browser")
    holder = hold("orders:7", "web-1", task=("9f1c", "shop.charge"))
    waiter = queue_behind("orders:7", "waiter-a", 1)
    odd = hold(XSS, XSS)
    reader = hold("catalog", "reader-1", shared=True)
    dialogs = []
    try:
        with chromium_page() as page:
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            login(page, live_server.url)
            row = page.locator("tr.zk-lock", has=page.locator("a.zk-name", has_text="orders:7"))
            assert "web-1" in row.locator("td.zk-holder").inner_text()
            assert "waiter-a" in row.locator("li.zk-waiter").first.inner_text()
            assert row.locator("td.zk-queue-length").inner_text() == "1"
            # A name full of markup is shown as text, and nothing ran.
            assert page.locator("a.zk-name", has_text=XSS).count() == 1
            assert dialogs == []
            shot = Path(os.environ.get("ZKLOCKS_ADMIN_SCREENSHOT", tmp_path / "admin.png"))
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            # Search by name.
            page.fill("#searchbar", "ORDERS")
            page.press("#searchbar", "Enter")
            page.wait_for_url("**q=ORDERS**")
            assert page.locator("tr.zk-lock").count() == 1
            # Filter by kind.
            page.click("#changelist-filter a:text-is('shared')")
            page.wait_for_url("**kind=shared**")
            assert page.locator("tr.zk-lock").count() == 0  # the search still applies
            page.goto(live_server.url + "/admin/zklocks/lock/?kind=shared")
            assert [n.inner_text() for n in page.locator("a.zk-name").all()] == ["catalog"]

            # Detail page.
            page.goto(live_server.url + "/admin/zklocks/lock/?q=orders")
            page.click("a.zk-name:text-is('orders:7')")
            assert "web-1" in page.locator("tr.zk-holder-row").inner_text()
            assert "waiter-a" in page.locator("tr.zk-waiter-row").inner_text()

            # Force-release, with confirmation.
            page.click("a.zk-release")
            assert "does not stop a live holder" in page.locator(".zk-warning").inner_text()
            page.click("input.zk-confirm")
            assert "Force-released" in page.locator("ul.messagelist").inner_text()
            assert waiter.wait(10) and waiter.token > holder.token
            page.reload()
            assert "waiter-a" in page.locator("tr.zk-holder-row").inner_text()
        holder.release()
        assert isinstance(holder.lost, LockLost) and holder.lost.reason == "deleted"
        wait_until(lambda: read_model.lock_info("default", "orders:7")[0].holder.thread == "waiter-a")
    finally:
        for t in (holder, waiter, odd, reader):
            t.release()


def test_modes_kinds_long_names_and_the_release_button(live_server, allow_orm_beside_playwright, tmp_path):
    """A writer holding with readers queued behind it is an exclusive hold; waiters show their mode; a long name
    wraps instead of widening the page; Force-release sits under the holders, clear of the queue's heading."""
    User.objects.create_superuser("admin", password="pw-for-browser")
    long_name = "report:" + "x" * 190
    writer = hold("catalog", "writer-1")
    reader = queue_behind("catalog", "reader-1", 1, shared=True)
    long_holder = hold(long_name, "long-1")
    try:
        with chromium_page(viewport=(1024, 768)) as page:
            login(page, live_server.url)
            row = page.locator("tr.zk-lock", has=page.locator("a.zk-name", has_text="catalog"))
            assert row.locator("td.zk-kind").inner_text().strip().lower() == "exclusive"
            assert row.locator("li.zk-waiter .zk-mode").inner_text().strip().lower() == "shared"
            page.screenshot(path=str(tmp_path / "list.png"), full_page=True)

            page.locator("a.zk-name", has_text=long_name).click()
            page.wait_for_selector("h1 code.zk-name")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 1024, f"the detail page is {width}px wide for a 1024px window"
            button = page.locator("a.zk-release").bounding_box()
            holders = page.locator("table.zk-detail").nth(1).bounding_box()
            heading = page.locator("h2", has_text="waiting").bounding_box()
            assert holders["y"] + holders["height"] <= button["y"]  # under the holders...
            assert button["y"] + button["height"] <= heading["y"]  # ...and above the queue's heading
            page.screenshot(path=str(tmp_path / "detail.png"), full_page=True)
            assert (tmp_path / "detail.png").stat().st_size > 10_000
    finally:
        for t in (writer, reader, long_holder):  # the writer first: the reader queued behind it ends once it held
            t.release()


def test_the_list_looks_like_a_django_changelist_from_1024_to_1920(
    live_server, allow_orm_beside_playwright, kz, tmp_path
):
    """The lock list as Django lays out its own changelists: no horizontal overflow, the filter in the sidebar
    beside the results, "Tasks by key" below them, and lock names wrapped without a name cell squeezed to a
    few letters, with long names, holders, queues and queued tasks on the page."""
    from zklocks import conf
    from zklocks.execution.unique import marker_data
    from zklocks.names import encode_name

    User.objects.create_superuser("admin", password="pw-for-browser")
    ns = conf.alias_config().namespace
    long_name = "reports:monthly/" + "/".join(f"customer-{i:04d}" for i in range(12))
    holders = [hold(long_name, "web-1", task=("9f1c", "shop.invoices.render")), hold("orders:7", "web-2")]
    waiters = [queue_behind("orders:7", f"waiter-{i}", i + 1) for i in range(3)]
    kz.create(
        f"{ns}/{encode_name('export:' + 'x' * 180)}/__queued__",
        marker_data("b" * 36, "shop.export", "queued", 60.0, None),
        makepath=True,
    )
    try:
        with chromium_page(viewport=(1280, 900)) as page:
            login(page, live_server.url)
            for width in (1024, 1280, 1500, 1920):
                page.set_viewport_size({"width": width, "height": 900})
                page.reload()
                scroll = page.evaluate("document.documentElement.scrollWidth")
                assert scroll <= width, f"the list is {scroll}px wide in a {width}px window"
                results = page.locator("#changelist .results").bounding_box()
                sidebar = page.locator("#changelist-filter").bounding_box()
                assert sidebar["x"] >= results["x"] + results["width"] - 1, (width, results, sidebar)
                assert sidebar["y"] < results["y"] + results["height"]  # beside the results, not below them
                tasks = page.locator("#zk-task-keys").bounding_box()
                assert tasks["y"] >= results["y"] + results["height"], (width, results, tasks)
                char = page.evaluate(
                    "(() => { const c = document.createElement('canvas').getContext('2d');"
                    " c.font = getComputedStyle(document.querySelector('a.zk-name')).font;"
                    " return c.measureText('x').width; })()"
                )
                for cell in page.locator("#result_list th[scope=row]").all():
                    box = cell.bounding_box()
                    assert box["width"] >= 12 * char, (width, cell.inner_text()[:40], box["width"], char)
                page.screenshot(path=str(tmp_path / f"list-{width}.png"), full_page=True)
    finally:
        for t in holders + waiters:  # holders first: a waiter's thread ends once it held
            t.release()
