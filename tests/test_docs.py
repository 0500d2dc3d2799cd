"""The documentation holds together: links resolve, pages speak to users, data folders explain themselves.

Pure file checks on the repository's own Markdown (README.md and docs/**/*.md); no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DATA = DOCS / "data"

# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")".
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EXTERNAL = ("http://", "https://", "mailto:", "ftp://")

# Lab-log words a user cannot look up: internal issue numbers, campaign rounds, the project's
# private source material, citation keys of internal notes, how a machine was obtained.
_FORBIDDEN = {
    # An upstream reference keeps its "#" ("sglang issue #32226") and is fine: a user can look it up.
    "issue number": re.compile(r"\bissues? \d+", re.IGNORECASE),
    "campaign round": re.compile(r"\bround \d+", re.IGNORECASE),
    "private source": re.compile(r"\bthe seeds\b", re.IGNORECASE),
    "internal citation": re.compile(r"\breference [A-Z]\.\d*"),
    "machine loan": re.compile(r"\blent\b", re.IGNORECASE),
}


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _user_pages() -> list[Path]:
    """README.md and every docs page outside docs/data/ (run records may keep their dated prose)."""
    return [p for p in _pages() if DATA not in p.parents]


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def _links(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(path):
        # Inline code spans may show link syntax as an example; they are not links.
        text = re.sub(r"`[^`]*`", "", line)
        found.extend((number, m.group(1)) for m in _LINK.finditer(text))
    return found


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_checks_see_pages_and_links() -> None:
    """Guards the guards: a glob or regex that matched nothing would pass every test below."""
    pages = _pages()
    assert ROOT / "README.md" in pages and DOCS / "results.md" in pages
    assert sum(len(_links(p)) for p in pages) > 50
    assert _LINK.findall("see [a](b.md#x) and ![img](../img/p.png \"t\")") == ["b.md#x", "../img/p.png"]


@pytest.mark.parametrize("page", _pages(), ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for number, target in _links(page):
        if target.startswith(_EXTERNAL) or target.startswith("#"):
            continue
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        if not file_part:
            continue
        if not (page.parent / file_part).exists():
            broken.append(f"{_rel(page)}:{number}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", _user_pages(), ids=_rel)
def test_user_pages_have_no_lab_log_references(page: Path) -> None:
    hits = []
    for number, line in _prose_lines(page):
        for what, pattern in _FORBIDDEN.items():
            match = pattern.search(line)
            if match:
                hits.append(f"{_rel(page)}:{number}: {what}: {match.group(0)!r}")
    assert not hits, "internal references a user cannot look up:\n" + "\n".join(hits)


def test_forbidden_patterns_catch_what_they_name() -> None:
    samples = {
        "issue number": "as issue 33 asks",
        "campaign round": "Round 11's single run",
        "private source": "the seeds' winner",
        "internal citation": "cumulative (reference E.7)",
        "machine loan": "on the lent H200",
    }
    for what, text in samples.items():
        assert _FORBIDDEN[what].search(text), what
    for text in ("excellent", "--rounds 8", "a reference page", "surrounding 4", "sglang issue #32226"):
        assert not any(p.search(text) for p in _FORBIDDEN.values()), text


def test_every_data_folder_has_a_readme() -> None:
    folders = [p for p in sorted(DATA.iterdir()) if p.is_dir()]
    assert folders, "docs/data holds no run folder"
    missing = [_rel(p) for p in folders if not (p / "README.md").is_file()]
    assert not missing, f"data folders without a README.md: {missing}"


def test_results_page_links_every_data_folder() -> None:
    """docs/results.md is the one way in: each run's record is reachable from it."""
    text = (DOCS / "results.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in sorted(DATA.iterdir()) if p.is_dir() and f"data/{p.name}/" not in text]
    assert not unlinked, f"docs/results.md does not link: {unlinked}"
