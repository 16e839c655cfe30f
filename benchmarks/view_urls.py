"""The views of the view benchmark: the demo's reservation, guarded four ways, sync and async.

``/sync/zk/<sku>/`` is the demo's own view (``demo_project.shop.views.reserve``: ``zk_lock`` with
``release_on_commit`` inside the request's transaction). The others do the same read-check-write of the stock
row without a lock (it oversells: two requests read the same stock and both write it minus one), with
``select_for_update`` (the row lock of PostgreSQL), with redis-py's ``Lock`` (taken outside the transaction,
released after the commit), and with the ZooKeeper floor: the least any lock on ZooKeeper costs a request, one
ephemeral node created and deleted with raw kazoo calls (see ``sync_floor``). The async views do the same: the
lock is awaited in the event loop and the transaction runs in one ``sync_to_async`` call inside it.
"""

from __future__ import annotations

import os
import threading

import redis
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from benchmarks.workloads import floor_client
from demo_project.shop.models import Product, Reservation
from demo_project.shop.views import reserve as demo_reserve
from zklocks import zk_lock

_redis = redis.Redis.from_url(settings.REDIS_URL)
_aredis = None
# redis-py polls for a busy lock; its default sleep of 0.1 s would make the hot SKU a measure of that sleep.
REDIS_SLEEP = 0.005


def _quantity(request: HttpRequest) -> int:
    return int(request.POST.get("quantity", "1"))


def _reserve_rows(
    sku: str, quantity: int, token: int = 0, for_update: bool = False, fenced: bool = False
) -> JsonResponse:
    """The demo view's critical section: read the stock, check it, write it, record the reservation. ``fenced``:
    the demo view's write, refused if a later holder (higher token) has written the row already."""
    products = Product.objects.filter(sku=sku)
    if for_update:
        products = products.select_for_update()
    product = products.first()
    if product is None:
        return JsonResponse({"ok": False, "error": "no such product"}, status=404)
    if product.stock < quantity:
        return JsonResponse({"ok": False, "error": "sold out"}, status=409)
    row = Product.objects.filter(pk=product.pk)
    if fenced:
        if not row.filter(fence__lte=token).update(stock=product.stock - quantity, fence=token):
            return JsonResponse({"ok": False, "error": "stale holder"}, status=409)
    else:
        row.update(stock=product.stock - quantity)
    reservation = Reservation.objects.create(product=product, quantity=quantity, token=token)
    return JsonResponse({"ok": True, "reservation": reservation.pk, "left": product.stock - quantity}, status=201)


def _in_transaction(sku: str, quantity: int, for_update: bool = False) -> JsonResponse:
    with transaction.atomic():
        return _reserve_rows(sku, quantity, for_update=for_update)


# -- sync views (ATOMIC_REQUESTS: each runs in the request's transaction) --


@csrf_exempt
def sync_none(request, sku):
    return _reserve_rows(sku, _quantity(request))


@csrf_exempt
def sync_sfu(request, sku):
    return _reserve_rows(sku, _quantity(request), for_update=True)


@csrf_exempt
@transaction.non_atomic_requests
def sync_redis(request, sku):
    with _redis.lock(f"stock:{sku}", timeout=30, sleep=REDIS_SLEEP, blocking_timeout=30):
        return _in_transaction(sku, _quantity(request))


FLOOR_ROOT = "/zklocks-view-bench-floor"
_floor: tuple[int, KazooClient] | None = None


def _floor_client() -> KazooClient:
    """One raw kazoo client per worker process, on the I/O handler zklocks sessions use."""
    global _floor
    if _floor is None or _floor[0] != os.getpid():
        client = floor_client(settings.ZKLOCKS["default"]["HOSTS"], "default")
        client.ensure_path(FLOOR_ROOT)
        _floor = (os.getpid(), client)
    return _floor[1]


def _floor_take(client: KazooClient, node: str) -> int:
    """Create the floor's node, waiting for it while it exists; the value is its czxid (a fencing token)."""
    while True:
        try:
            return client.create(node, ephemeral=True, include_data=True)[1].czxid
        except NodeExistsError:
            gone = threading.Event()
            if client.exists(node, watch=lambda event, gone=gone: gone.set()):
                gone.wait(30)


@csrf_exempt
@transaction.non_atomic_requests
def sync_floor(request, sku):
    """The ZooKeeper floor: a lock that is one ephemeral node, a create to take it and a delete to free it.

    Busy, it watches the node and tries again when it goes (every waiter wakes: fine for a floor, not for a
    library). It has no queue, no fencing check, no lost-lock detection, no observers: nothing but the two
    writes that any lock on ZooKeeper pays. The transaction commits before the delete, as with release_on_commit.
    """
    client = _floor_client()
    node = f"{FLOOR_ROOT}/{sku}"
    _floor_take(client, node)
    try:
        return _in_transaction(sku, _quantity(request))
    finally:
        client.delete(node)


@csrf_exempt
@transaction.non_atomic_requests
def sync_floor_checked(request, sku):
    """The floor with the demo view's check: what the demo's ``lock.ensure_held()`` sends (a ``sync`` and an
    ``exists`` of its own node, pipelined) before the write, and the same fenced write (the node's czxid as the
    token). Two writes and one round trip of reads: the least a lock that checks it still holds costs."""
    client = _floor_client()
    node = f"{FLOOR_ROOT}/{sku}"
    token = _floor_take(client, node)
    try:
        with transaction.atomic():
            synced, present = client.sync_async(node), client.exists_async(node)
            synced.get()
            if present.get() is None:
                return JsonResponse({"ok": False, "error": "lock lost"}, status=409)
            return _reserve_rows(sku, _quantity(request), token, fenced=True)
    finally:
        client.delete(node)


@csrf_exempt
@transaction.non_atomic_requests
def sync_zk_floor_shaped(request, sku):
    """zk_lock in the shape of ``sync_floor_checked``: the same view with the floor's lock replaced by
    ``zk_lock`` (its ``ensure_held()``, its token for the fenced write, the release after the commit). Against that
    floor it measures the lock alone; against the demo's view, what the demo view adds around it."""
    with zk_lock(f"stock:{sku}", timeout=settings.DEMO_LOCK_TIMEOUT) as lock:
        with transaction.atomic():
            lock.ensure_held()
            return _reserve_rows(sku, _quantity(request), lock.token, fenced=True)


# -- async views (ATOMIC_REQUESTS does not apply to them: the transaction is inside the lock) --


@csrf_exempt
@transaction.non_atomic_requests
async def async_none(request, sku):
    return await sync_to_async(_in_transaction)(sku, _quantity(request))


@csrf_exempt
@transaction.non_atomic_requests
async def async_zk(request, sku):
    async with zk_lock(f"stock:{sku}", timeout=settings.DEMO_LOCK_TIMEOUT):
        return await sync_to_async(_in_transaction)(sku, _quantity(request))


@csrf_exempt
@transaction.non_atomic_requests
async def async_sfu(request, sku):
    return await sync_to_async(_in_transaction)(sku, _quantity(request), True)


@csrf_exempt
@transaction.non_atomic_requests
async def async_redis(request, sku):
    global _aredis
    if _aredis is None:
        _aredis = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    async with _aredis.lock(f"stock:{sku}", timeout=30, sleep=REDIS_SLEEP, blocking_timeout=30):
        return await sync_to_async(_in_transaction)(sku, _quantity(request))


urlpatterns = [
    path("sync/none/<slug:sku>/", sync_none),
    path("sync/zk/<slug:sku>/", demo_reserve),
    path("sync/sfu/<slug:sku>/", sync_sfu),
    path("sync/redis/<slug:sku>/", sync_redis),
    path("sync/floor/<slug:sku>/", sync_floor),
    path("sync/floorcheck/<slug:sku>/", sync_floor_checked),
    path("sync/zkshaped/<slug:sku>/", sync_zk_floor_shaped),
    path("async/none/<slug:sku>/", async_none),
    path("async/zk/<slug:sku>/", async_zk),
    path("async/sfu/<slug:sku>/", async_sfu),
    path("async/redis/<slug:sku>/", async_redis),
]
