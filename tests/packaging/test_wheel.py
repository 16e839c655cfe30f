"""A wheel built from the tree installs into a fresh virtualenv (from PyPI, like a user's), imports, and serves
`django-admin check`; the extras bring what Celery's Redis transport needs."""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TINY_SETTINGS = """\
SECRET_KEY = "throwaway"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "zklocks"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
ZKLOCKS = {"default": {"HOSTS": "127.0.0.1:2181"}}
USE_TZ = True
"""


def run(argv, cwd, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DJANGO_", "VIRTUAL_ENV", "PYTEST"))}
    result = subprocess.run(
        argv, cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def source_copy(dest: Path) -> Path:
    """The files git knows of (tracked, or new and not ignored): no build/, .venv, .demo or caches."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    with tarfile.open(dest.with_suffix(".tar"), "w") as tar:
        for name in filter(None, files):
            if (ROOT / name.decode()).is_file():
                tar.add(ROOT / name.decode(), arcname=name.decode())
    with tarfile.open(dest.with_suffix(".tar")) as tar:
        tar.extractall(dest, filter="data")
    return dest


def test_wheel_installs_into_a_fresh_venv(tmp_path):
    src = source_copy(tmp_path / "src")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)], cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("django_zklocks-*.whl")

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"zklocks/py.typed", "zklocks/migrations/0001_initial.py", "zklocks/middleware.py"} <= names
    assert any(n.startswith("zklocks/templates/admin/zklocks/") for n in names)
    assert not any(n.startswith(("tests/", "demo_project/", "benchmarks/")) for n in names)
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra: ")}
    assert {"celery", "redis", "metrics"} <= extras
    # One source for the version: the wheel's, zklocks.__version__ and the CHANGELOG's newest entry agree.
    import zklocks

    assert f"Version: {zklocks.__version__}\n" in metadata
    newest = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert newest.startswith(f"## {zklocks.__version__} "), newest

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    run([*pip, "--python", str(python), "install", "-q", f"{wheel}[redis]"], cwd=tmp_path)

    out = run(
        [
            str(python),
            "-c",
            "import zklocks, zklocks.celery.task, kombu.transport.redis, redis; print(zklocks.__file__)",
        ],
        cwd=tmp_path,
    )
    assert out.startswith(str(venv / "lib")), out  # the installed copy, not the tree
    (tmp_path / "tiny_settings.py").write_text(TINY_SETTINGS)
    out = run(
        [str(venv / "bin" / "django-admin"), "check"],
        cwd=tmp_path,
        DJANGO_SETTINGS_MODULE="tiny_settings",
        PYTHONPATH=str(tmp_path),
    )
    assert out == "System check identified no issues (0 silenced).\n"
