"""The documents agree with the code and with each other: every system check id the code uses is in the
reference's table (and the table lists no other), and every relative link of the Markdown documents points at a
file of the repository. ``make docs`` checks the site's own links and anchors (mkdocs build --strict)."""

import re
from pathlib import Path

import pytest

from tests.support.project import ROOT

CHECK_ID = re.compile(r"\bzklocks\.([EW]\d{3})\b")


def ids_in_code() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "zklocks").rglob("*.py"):
        found.update(CHECK_ID.findall(path.read_text()))
    return found


def ids_in_table(document: str, heading: str) -> set[str]:
    """The ids in the rows of the table under ``heading`` (a row may name more than one: "E005 / E006")."""
    text = (ROOT / document).read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| zklocks.")]
    return {found for row in rows for found in re.findall(r"\b([EW]\d{3})\b", row.split("|")[1])}


def test_the_reference_lists_every_check_id():
    in_code = ids_in_code()
    assert {"E017", "W004", "E060"} <= in_code
    assert ids_in_table("docs/reference.md", "## System checks") == in_code


def test_the_deploy_check_ids_on_the_operations_page():
    """The deploy checks (registered with deploy=True in zklocks/apps.py) and the ids they report."""
    table = ids_in_table("docs/operations.md", "## Checking a deployment: `manage.py zklocks_check`")
    assert table == {"E015", "W002", "W003", "E017", "W004"}


DOCUMENTS = [
    "README.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "BENCHMARKS.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_relative_links_point_at_files_of_the_repository(document):
    path = ROOT / document
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.M | re.S)
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists() or not Path(path.parent / file).resolve().is_relative_to(ROOT):
            missing.append(target)
    assert missing == []


def test_one_list_of_pages_the_sites_nav_and_the_index_agree():
    """mkdocs.yml's nav is the site's list; docs/index.md lists the same pages in the same order, and the README
    points at it instead of keeping a third list."""
    import yaml

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)

    nav = [p for p in pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]) if p != "index.md"]
    index = (ROOT / "docs" / "index.md").read_text()
    table = index[index.index("## The pages") :]
    listed = re.findall(r"^\| \[[^\]]+\]\(([a-z_-]+\.md)\)", table, flags=re.M)
    assert listed == nav
    readme = (ROOT / "README.md").read_text()
    assert "docs/index.md#the-pages" in readme
    assert not re.search(r"^\| \[[^\]]+\]\(docs/[a-z_-]+\.md\) \|", readme, flags=re.M)
