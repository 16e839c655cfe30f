"""make test-matrix: the suite on each supported pair of Python and Django (session ``tests``), and the lock tests
on the lowest and the highest supported kazoo (session ``kazoo``). Django 6.1 on Python 3.12 is also what
``make test`` runs; 5.2 LTS runs with the django-tasks backport (requirements.txt adds it on Python 3.11)."""

import glob
import os
import shutil
import subprocess

import nox

nox.options.reuse_existing_virtualenvs = True


def interpreter(version: str) -> str:
    """A working python3.X: from PATH (pyenv shims may exist and still refuse), else pyenv's versions."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    return candidates[-1] if candidates else version


MATRIX = [
    (interpreter("3.11"), "Django>=5.2,<5.3"),
    (interpreter("3.12"), "Django>=6.1,<6.2"),
    (interpreter("3.13"), "Django>=6.1,<6.2"),  # pyproject.toml's classifiers claim 3.13
]

# The ends of pyproject.toml's kazoo range (zklocks.client.kazoo_adapter.compat.SUPPORTED): the lowest on the oldest
# Python, the highest on the newest. zklocks hooks kazoo internals, so each end runs the lock tests and the
# self-check's.
KAZOO = [
    (interpreter("3.11"), "kazoo==2.9.0"),
    (interpreter("3.13"), "kazoo==2.11.0"),
]
LOCK_TESTS = [
    "tests/locks",
    "tests/faults/test_io_handler.py",
    "tests/packaging/test_kazoo_compat.py",
    "tests/packaging/test_portable_import.py",
]


def install_requirements(session) -> None:
    session.install("-r", "requirements.txt")
    session.install("--no-deps", "-r", "requirements-nodeps.txt")  # see there


@nox.session
@nox.parametrize(("python", "django"), MATRIX, ids=["django52", "django61", "py313-django61"])
def tests(session, django):
    install_requirements(session)
    session.install(django)
    session.install("-e", ".", "--no-deps")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session
@nox.parametrize(("python", "kazoo"), KAZOO, ids=["lowest", "highest"])
def kazoo(session, kazoo):
    install_requirements(session)
    session.install(kazoo)
    session.install("-e", ".", "--no-deps")
    session.run("python", "-m", "pytest", "-q", *(session.posargs or LOCK_TESTS))
