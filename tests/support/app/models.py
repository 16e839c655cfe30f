from django.db import models


class Stock(models.Model):
    quantity = models.IntegerField()
    fence = models.BigIntegerField(default=0)

    class Meta:
        app_label = "app"

    def __str__(self) -> str:
        return f"stock {self.quantity} (fence {self.fence})"
