"""A URLconf routing to typo_views.py: manage.py check must find the view's alias typo (zklocks.E012)."""

from django.urls import path

from tests.support import typo_views

urlpatterns = [path("report/", typo_views.report)]
