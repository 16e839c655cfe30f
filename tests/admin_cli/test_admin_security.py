"""The admin against a real server: the longest unicode names open and force-release, and the force-release page
shows holder details only to users who may view locks."""

import re
import socket
import time

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from tests.support.threads import hold
from zklocks import LockLost
from zklocks.models import Lock
from zklocks.names import MAX_NAME_LENGTH, encode_name
from zklocks.ops import read_model

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

# 200 characters of four UTF-8 bytes each: the longest node name a valid lock name gives (2,400 characters).
LONGEST = "\U0001d11e" * (MAX_NAME_LENGTH - 2) + "éx"


def urls(name, alias="default"):
    key = quote(Lock.make_key(alias, encode_name(name)))
    return reverse("admin:zklocks_lock_change", args=(key,)), reverse("admin:zklocks_lock_release", args=(key,))


def staff(*codenames):
    user = User.objects.create_user("staff-" + "-".join(codenames), password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="zklocks"))
    client = Client()
    client.force_login(user)
    return client


def test_a_200_character_unicode_name_opens_and_force_releases(admin_client):
    assert len(LONGEST) == MAX_NAME_LENGTH and len(encode_name(LONGEST)) > 1000
    holder = hold(LONGEST, "web-long")
    try:
        detail, release = urls(LONGEST)
        response = admin_client.get(detail)
        assert response.status_code == 200
        assert LONGEST in response.content.decode() and "web-long" in response.content.decode()
        page = admin_client.get(release)
        assert page.status_code == 200 and "Yes, force-release" in page.content.decode()
        info, _ = read_model.lock_info("default", LONGEST)
        response = admin_client.post(release, {"post": "yes", "holder": f"{info.holder.node}:{info.holder.token}"})
        assert response.status_code == 302 and response["Location"] == detail
        assert (
            read_model.lock_info("default", LONGEST)[0] is None
            or not read_model.lock_info("default", LONGEST)[0].holders
        )
        holder.release()
        assert isinstance(holder.lost, LockLost) and holder.lost.reason == "deleted"
        assert LogEntry.objects.get().object_id == Lock.make_key("default", encode_name(LONGEST))
    finally:
        holder.release()


def shown(detail: str, page: str) -> bool:
    """``detail`` on the page as a word of its own: a short host name ("vm") is also part of Django's markup."""
    return re.search(rf"(?<![\w.-]){re.escape(detail)}(?![\w.-])", page) is not None


def test_the_force_release_page_shows_holder_details_only_with_the_view_permission(busy_orders):
    holder, _ = busy_orders
    info, _ = read_model.lock_info("default", "orders:7")
    _, release = urls("orders:7")
    details = ("web-1", "shop.charge", "task-abc", info.holder.session_hex, socket.gethostname())

    releaser = staff("force_release_lock")
    page = releaser.get(release).content.decode()
    assert "Yes, force-release" in page
    assert f'name="holder" value="{info.holder.node}:{info.holder.token}"' in page
    assert f"token {info.holder.token}" in page
    assert [d for d in details if shown(d, page)] == []

    page = staff("force_release_lock", "view_lock").get(release).content.decode()
    assert [d for d in details if shown(d, page)] == list(details)

    # Without the view permission the release itself still works.
    response = releaser.post(release, {"post": "yes", "holder": f"{info.holder.node}:{info.holder.token}"})
    assert response.status_code == 302
    # The holder hears of it by its watch on its own node: one notification, which may still be on its way.
    deadline = time.monotonic() + 10
    while holder.handle.is_held and time.monotonic() < deadline:
        time.sleep(0.01)
    holder.release()
    assert isinstance(holder.lost, LockLost)
