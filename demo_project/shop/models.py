from django.db import models


class Product(models.Model):
    sku = models.CharField(max_length=32, unique=True)
    name = models.CharField(max_length=100)
    stock = models.IntegerField()
    # The highest fencing token that wrote this row: a holder whose lock was lost (and taken over) carries a
    # lower token, and its late write is refused.
    fence = models.BigIntegerField(default=0)
    audited_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.sku} ({self.stock} left)"


class Reservation(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="reservations")
    quantity = models.PositiveIntegerField(default=1)
    token = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.quantity} x {self.product_id} (token {self.token})"


class Report(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    reservations = models.IntegerField()
    units = models.IntegerField()
    token = models.BigIntegerField()

    def __str__(self) -> str:
        return f"report of {self.reservations} reservations, {self.units} units (token {self.token})"
