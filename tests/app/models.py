from django.db import models


class Stock(models.Model):
    quantity = models.IntegerField()
    fence = models.BigIntegerField(default=0)

    class Meta:
        app_label = "app"
