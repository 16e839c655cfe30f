from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Lock",
            fields=[
                ("key", models.CharField(max_length=512, primary_key=True, serialize=False)),
                ("alias", models.CharField(max_length=100)),
                ("name", models.CharField(max_length=200)),
            ],
            options={
                "verbose_name": "lock",
                "verbose_name_plural": "locks",
                "db_table": "zklocks_lock",
                "managed": False,
                "default_permissions": ("view",),
                "permissions": [("force_release_lock", "Can force-release a lock (delete its holder's node)")],
            },
        ),
    ]
