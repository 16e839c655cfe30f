"""make test-matrix: the suite on each supported pair of Python and Django, in one parametrised session."""

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
    (interpreter("3.12"), "Django>=6.0,<7"),
]


@nox.session
@nox.parametrize(("python", "django"), MATRIX, ids=["django52", "django6"])
def tests(session, django):
    session.install("-r", "requirements.txt")
    session.install(django)
    session.install("-e", ".", "--no-deps")
    session.run("python", "-m", "pytest", "-q", *session.posargs)
