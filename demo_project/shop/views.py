"""The demo shop: critical sections guarded by zk_lock.

ATOMIC_REQUESTS is on, so every view runs in a transaction that commits after the view returns. A lock
released when the ``with`` block ends would let the next request read the stock before this one's write is
committed; ``release_on_commit=True`` holds the lock until the commit (and releases at once on rollback).
"""

import time

from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import Count, F, Sum
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from zklocks import LockLost, LockTimeout, ZkUnavailable, zk_lock, zk_multi_lock

from .models import Product, Reservation


def _busy(message: str, status: int = 503) -> JsonResponse:
    transaction.set_rollback(True)
    return JsonResponse({"ok": False, "error": message}, status=status)


@csrf_exempt
@require_POST
def reserve(request, sku):
    """Reserve units of one product; never oversells, whatever the concurrency."""
    try:
        quantity = int(request.POST.get("quantity", "1"))
    except ValueError:
        quantity = 0
    if not 1 <= quantity <= 10:
        return JsonResponse({"ok": False, "error": "quantity must be 1..10"}, status=400)
    try:
        with zk_lock(f"stock:{sku}", timeout=settings.DEMO_LOCK_TIMEOUT, release_on_commit=True) as lock:
            if settings.DEMO_WORK_DELAY:
                time.sleep(settings.DEMO_WORK_DELAY)  # the payment provider answers slowly
            lock.ensure_held()  # one read: catches a force-release from the admin before we touch the data
            product = Product.objects.filter(sku=sku).first()
            if product is None:
                return JsonResponse({"ok": False, "error": "no such product"}, status=404)
            if product.stock < quantity:
                return JsonResponse({"ok": False, "error": "sold out", "left": product.stock}, status=409)
            # A fenced write: refused if a later holder (higher token) has written this row already.
            written = Product.objects.filter(pk=product.pk, fence__lte=lock.token).update(
                stock=product.stock - quantity, fence=lock.token
            )
            if not written:
                return _busy("stale lock holder: write refused by the fencing token", 409)
            reservation = Reservation.objects.create(product=product, quantity=quantity, token=lock.token)
        # Still inside the request's transaction: the response is built, the confirmation queued... A lock
        # released at the end of the ``with`` would let the next buyer read the stock before we commit.
        if settings.DEMO_AFTER_DELAY:
            time.sleep(settings.DEMO_AFTER_DELAY)
        return JsonResponse(
            {"ok": True, "reservation": reservation.pk, "left": product.stock - quantity, "token": lock.token},
            status=201,
        )
    except LockTimeout:
        return _busy("too many buyers, try again")
    except LockLost:
        return _busy("the lock was taken away (force-released?): nothing reserved", 409)
    except ZkUnavailable:
        return _busy("ZooKeeper is unavailable")
    except OperationalError:
        # SQLite has one writer at a time: a transaction that read before another one committed cannot
        # write. Same-product requests never meet here (the lock orders them); other writers rarely do.
        return _busy("database busy, try again")


def _catalog():
    # Shared lock: many readers at once, none while a restock (exclusive) runs.
    with zk_lock("catalog", shared=True, timeout=settings.DEMO_LOCK_TIMEOUT):
        time.sleep(settings.DEMO_READ_DELAY)
        return list(
            Product.objects.annotate(reserved=Sum("reservations__quantity"), orders=Count("reservations")).order_by(
                "sku"
            )
        )


@require_GET
def home(request):
    try:
        products = _catalog()
    except (LockTimeout, ZkUnavailable) as exc:
        return render(request, "shop/home.html", {"error": str(exc), "products": []}, status=503)
    return render(request, "shop/home.html", {"products": products})


@require_GET
def catalog(request):
    try:
        products = _catalog()
    except (LockTimeout, ZkUnavailable) as exc:
        return _busy(str(exc))
    return JsonResponse(
        {
            "products": [
                {
                    "sku": p.sku,
                    "name": p.name,
                    "stock": p.stock,
                    "reserved": p.reserved or 0,
                    "orders": p.orders,
                    "fence": p.fence,
                }
                for p in products
            ]
        }
    )


@csrf_exempt
@require_POST
@transaction.non_atomic_requests
def restock(request):
    """Refill every product: the exclusive catalog lock plus every product's stock lock, all or none.

    The other way around the release-before-commit pitfall: take the locks outside the transaction and
    commit inside them.
    """
    try:
        units = max(1, min(int(request.POST.get("units", "20")), 1000))
    except ValueError:
        return JsonResponse({"ok": False, "error": "units must be a number"}, status=400)
    skus = list(Product.objects.order_by("sku").values_list("sku", flat=True))
    try:
        with (
            zk_multi_lock(["catalog", *[f"stock:{sku}" for sku in skus]], timeout=settings.DEMO_LOCK_TIMEOUT) as locks,
            transaction.atomic(),
        ):
            for sku in skus:
                token = locks.tokens[f"stock:{sku}"]
                Product.objects.filter(sku=sku, fence__lte=token).update(stock=F("stock") + units, fence=token)
    except LockTimeout:
        return JsonResponse({"ok": False, "error": "the shop is busy, try again"}, status=503)
    except ZkUnavailable:
        return JsonResponse({"ok": False, "error": "ZooKeeper is unavailable"}, status=503)
    except OperationalError:
        return JsonResponse({"ok": False, "error": "database busy, try again"}, status=503)
    return JsonResponse({"ok": True, "units": units, "products": len(skus)})


@csrf_exempt
@require_POST
def enqueue(request, job):
    """Queue a Celery task (the load generator calls this)."""
    from demo_project import tasks

    if job == "report":
        result = tasks.daily_report.delay()
    elif job == "audit":
        result = tasks.audit_stock.delay(request.POST.get("sku", "tea"))
    elif job == "reindex":
        result = tasks.reindex.delay()
    else:
        return JsonResponse({"ok": False, "error": "unknown job"}, status=404)
    return JsonResponse({"ok": True, "task_id": result.id}, status=202)
