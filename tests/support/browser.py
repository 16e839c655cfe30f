"""Headless Debian Chromium through Playwright: never a downloaded browser, always a fresh profile."""

from __future__ import annotations

import contextlib
import shutil
import tempfile

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@contextlib.contextmanager
def chromium_page(viewport=(1400, 900)):
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="zklocks-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=FLAGS,
                viewport={"width": viewport[0], "height": viewport[1]},
            )
            try:
                page = context.new_page()
                page.set_default_timeout(15000)
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
