"""The pictures in the README and the guide: each drawn by tools/make_img.py from committed data
(so anyone can redraw them with the commands' own code), each one a page links to exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_picture_is_drawn_from_committed_data_and_present():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import make_img
    finally:
        sys.path.remove(str(ROOT / "tools"))
    drawn = set(make_img.pictures())
    on_disk = {p.name for p in (ROOT / "docs" / "img").glob("*.png")}
    assert drawn == on_disk  # no picture without its recipe, no recipe without its picture
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "make_img.py"), "--check"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_pages_link_only_pictures_that_exist():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    linked = []
    for page in pages:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", page.read_text(encoding="utf-8")):
            linked.append((page, target))
            assert (page.parent / target).resolve().is_file(), f"{page.relative_to(ROOT)} links {target}"
    # the ladder is on the README, the scan grid on the scan guide
    assert any(p.name == "README.md" and "ladder" in t for p, t in linked)
    assert any(p.name == "scan.md" and "scan" in t for p, t in linked)
