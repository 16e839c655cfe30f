"""mkdocs hook (mkdocs.yml, ``hooks:``): design references become links to their section, page references to
their page.

Code and docstrings cite the design page as ``docs/design.md §13`` or ``design.md §15``, and lists as
``docs/design.md §2 and §6`` or ``§9, §10``. mkdocstrings renders them as plain text; this hook rewrites the rendered
HTML of every page so that each ``§N`` links to the heading ``## N. ...`` of design.md, by the id the toc extension
gives that heading. A number with no such section fails the build, so that a stale reference is caught. A plain
``docs/lost.md`` becomes a link to that page; one to a page the site lacks fails the build too.

Text inside ``<a>``, ``<code>`` and ``<pre>`` is left as it is.
"""

from __future__ import annotations

import html
import re

from markdown import Markdown
from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

DESIGN = "design.md"
_SECTION = r"(?:§|&sect;|&#167;|&#xa7;)"
# "docs/design.md §13", "design.md §9, §10", "docs/design.md §2 and §6", "design.md\n§15)".
_REFERENCE = re.compile(
    rf"(?:docs/)?design\.md\s+{_SECTION}\d+(?!\d)(?:(?:\s*,\s*|\s+and\s+|\s*,\s*and\s+){_SECTION}\d+(?!\d))*"
)
# "docs/lost.md", but not the "docs/design.md" of a design reference (linked to its section above).
_PAGE = re.compile(rf"(?<![\w/.-])docs/((?:[\w-]+/)*[\w-]+\.md)(?!\s+{_SECTION}\d)")
_NUMBER = re.compile(rf"{_SECTION}(\d+)(?!\d)")
_HEADING = re.compile(r"^(\d+)\.\s")
_TAG = re.compile(r"(<[^>]*>)")
_SKIPPED = re.compile(r"<(/?)(a|code|pre|script|style|textarea)\b", re.IGNORECASE)

_state: dict = {}


def _sections(tokens: list[dict], found: dict[int, str]) -> dict[int, str]:
    """Section number -> heading id, from the ``## N. Title`` headings of a toc extension's tokens."""
    for token in tokens:
        match = _HEADING.match(html.unescape(token["name"]))
        if token["level"] == 2 and match:
            number = int(match.group(1))
            if number in found:
                raise PluginError(f"{DESIGN}: two sections numbered {number} (#{found[number]}, #{token['id']})")
            found[number] = token["id"]
        _sections(token["children"], found)
    return found


def on_files(files, config):
    """Reads the sections of design.md with the site's own Markdown extensions, so the ids are the page's ids."""
    design = files.get_file_from_path(DESIGN)
    if design is None:
        raise PluginError(f"hooks.py: {DESIGN} is not in the site; the design references cannot be linked")
    md = Markdown(extensions=config.markdown_extensions, extension_configs=config.mdx_configs)
    md.convert(design.content_string)
    sections = _sections(md.toc_tokens, {})
    if not sections:
        raise PluginError(f"hooks.py: no '## N. Title' section in {DESIGN}")
    _state.update(design=design, sections=sections, files=files)
    return files


def _link(reference: str, href: str, where: str) -> str:
    sections = _state["sections"]
    out, last = [], 0
    for match in _NUMBER.finditer(reference):
        number = int(match.group(1))
        if number not in sections:
            raise PluginError(
                f"{where}: '{html.unescape(reference)}' names §{number}, which is no section of {DESIGN} "
                f"(its sections: §{min(sections)} to §{max(sections)})"
            )
        start = 0 if last == 0 else match.start()  # the first link also covers "docs/design.md "
        out.append(reference[last:start])
        out.append(f'<a href="{href}#{sections[number]}">{reference[start : match.end()]}</a>')
        last = match.end()
    out.append(reference[last:])
    return "".join(out)


def _link_page(match: re.Match, page, where: str) -> str:
    target = _state["files"].get_file_from_path(match.group(1))
    if target is None:
        raise PluginError(f"{where}: '{match.group(0)}' names no page of the site")
    return f'<a href="{get_relative_url(target.url, page.url)}">{match.group(0)}</a>'


def on_page_content(content, page, config, files):
    href = get_relative_url(_state["design"].url, page.url)
    where = page.file.src_uri
    parts = _TAG.split(content)
    depth = 0
    for i, part in enumerate(parts):
        if i % 2:  # a tag
            skipped = _SKIPPED.match(part)
            if skipped and not part.endswith("/>"):
                depth = max(0, depth - 1) if skipped.group(1) else depth + 1
        elif depth == 0 and ".md" in part:
            part = _REFERENCE.sub(lambda match: _link(match.group(0), href, where), part)
            parts[i] = _PAGE.sub(lambda match: _link_page(match, page, where), part)
    if page.file.src_uri == DESIGN:
        ids = {anchor.id for anchor in _anchors(page.toc)}
        stale = {n: i for n, i in _state["sections"].items() if i not in ids}
        if stale:
            raise PluginError(f"hooks.py: the section ids read from {DESIGN} are not the page's: {stale}")
    return "".join(parts)


def _anchors(items):
    for item in items:
        yield item
        yield from _anchors(item.children)
