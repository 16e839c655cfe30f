"""make test-matrix: the suite on Python 3.11 + Django 5.2 and Python 3.12 + Django 6.x."""

import nox

nox.options.reuse_existing_virtualenvs = True


@nox.session(python="3.11")
def django52(session):
    session.install("-r", "requirements.txt")
    session.install("-e", ".", "--no-deps")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(python="3.12")
def django6(session):
    session.install("-r", "requirements.txt")
    session.install("Django>=6.0,<7")
    session.install("-e", ".", "--no-deps")
    session.run("python", "-m", "pytest", "-q", *session.posargs)
