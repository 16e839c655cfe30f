"""Screenshot of the admin page of a running demo (for the README): headless Debian Chromium via Playwright.

python -m demo_project.run &                      # wait for "ready"
python -m demo_project.screenshot docs/admin.png  # reads .demo/login.json
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "docs/admin.png")
    data = Path(os.environ.get("ZKLOCKS_DEMO_DIR", ROOT / ".demo"))
    login = json.loads((data / "login.json").read_text())
    profile = tempfile.mkdtemp(prefix="zklocks-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path="/usr/bin/chromium",
                headless=True,
                args=FLAGS,
                viewport={"width": 1500, "height": 820},
            )
            try:
                page = context.new_page()
                page.goto(login["url"] + "/admin/login/?next=/admin/zklocks/lock/")
                page.fill("#id_username", login["username"])
                page.fill("#id_password", login["password"])
                page.click("input[type=submit]")
                page.wait_for_url("**/admin/zklocks/lock/")
                for _ in range(40):  # wait for a moment with queues and a task among the holders
                    page.goto(login["url"] + "/admin/zklocks/lock/")
                    html = page.content()
                    if "task demo." in html and page.locator("li.zk-waiter").count() >= 3:
                        break
                    time.sleep(0.5)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
