from django.urls import path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("catalog.json", views.catalog, name="catalog"),
    path("reserve/<slug:sku>/", views.reserve, name="reserve"),
    path("restock/", views.restock, name="restock"),
    path("jobs/<slug:job>/", views.enqueue, name="enqueue"),
]
