import os

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from demo_project.shop.models import Product

PRODUCTS = [
    ("tea", "Green tea", 40),
    ("coffee", "Coffee beans", 40),
    ("cocoa", "Cocoa", 25),
    ("honey", "Honey", 15),
    ("rice", "Rice", 60),
]


class Command(BaseCommand):
    help = "Seed the demo shop and create (or reset) the admin user; the password comes from DEMO_ADMIN_PASSWORD."

    def add_arguments(self, parser):
        parser.add_argument("--stock", type=int, help="set every product's stock to this")
        parser.add_argument("--username", default="admin")

    def handle(self, *args, stock=None, username="admin", **options):
        for sku, name, default in PRODUCTS:
            product, created = Product.objects.get_or_create(sku=sku, defaults={"name": name, "stock": default})
            if stock is not None:
                Product.objects.filter(pk=product.pk).update(stock=stock)
        password = os.environ.get("DEMO_ADMIN_PASSWORD")
        if password:
            user, _ = User.objects.get_or_create(username=username, defaults={"email": "admin@example.com"})
            user.is_staff = user.is_superuser = True
            user.set_password(password)
            user.save()
        self.stdout.write(f"{Product.objects.count()} products")
