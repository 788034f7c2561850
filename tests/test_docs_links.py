"""Every reference to the documentation can be followed with this repository alone.

Code, tests and docs point maintainers to pages under ``docs/``, often to a named section
(``docs/design.md, "Operator hold"``). A renamed page or heading would leave those pointers
dangling without anyone noticing, so this checks that every relative link in the markdown
resolves, that every ``docs/<page>.md`` named in the source exists, and that every section a
pointer quotes is a heading of that page.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PAGE = re.compile(r"docs/([\w-]+\.md)")
SECTION = re.compile(r'(?:docs/|\]\()([\w-]+\.md)\)?,?\s+\(?"([^"\n]+)"')


def tracked(*patterns: str) -> list[Path]:
    """Files under version control (or about to be) matching the git pathspecs."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def headings(page: str) -> list[str]:
    text = (DOCS / page).read_text("utf-8")
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def test_every_relative_link_of_the_markdown_resolves() -> None:
    pages = tracked("*.md")
    assert DOCS / "contract.md" in pages and DOCS / "design.md" in pages
    for page in pages:
        for target in LINK.findall(page.read_text("utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} -> {target}"


def test_every_docs_page_named_in_the_source_exists() -> None:
    named = 0
    for path in tracked("*.py", "*.md", "*.conf", "justfile"):
        for page in PAGE.findall(path.read_text("utf-8")):
            named += 1
            assert (DOCS / page).is_file(), f"{path.relative_to(ROOT)} names docs/{page}"
    assert named > 20


def test_every_quoted_section_is_a_heading_of_its_page() -> None:
    quoted = 0
    for path in tracked("*.py", "*.md"):
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text("utf-8"))  # join wrapped lines
        for page, section in SECTION.findall(text):
            if not (DOCS / page).is_file():
                continue  # a page outside docs/ (README.md of a folder): not ours to check
            quoted += 1
            assert any(section in h for h in headings(page)), (
                f"{path.relative_to(ROOT)}: no section {section!r} in docs/{page}")
    assert quoted > 10
