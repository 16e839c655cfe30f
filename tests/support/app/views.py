import asyncio

from django.http import JsonResponse

from zklocks import zk_lock

_state = {"value": 0}


@zk_lock("counter", timeout=10)
async def counter(request):
    # A read-modify-write with an await in the middle: only safe under the lock.
    value = _state["value"]
    await asyncio.sleep(0.02)
    _state["value"] = value + 1
    return JsonResponse({"value": _state["value"]})
