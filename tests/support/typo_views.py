"""A view whose zk_lock names an alias that settings.ZKLOCKS lacks; imported only through typo_urls.py."""

from django.http import HttpResponse

from zklocks import zk_lock


@zk_lock("report", using="reprots")
def report(request):
    return HttpResponse("ok")
