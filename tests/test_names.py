"""One place for shared names (issue 18): phase names and labels live in runtime/probes/window.py,
the patch marker in runtime/marker.py; every other module imports them. A scan of the package
fails when a second definition appears."""

from __future__ import annotations

import ast
import re

from conftest import REPO

from sglang_eagle3_ext import patcher
from sglang_eagle3_ext.commands import profile_tables
from sglang_eagle3_ext.documents import prof_blocks
from sglang_eagle3_ext.measure import plot
from sglang_eagle3_ext.patcher import transform
from sglang_eagle3_ext.runtime.probes import metrics, window
from sglang_eagle3_ext.tune import tiers

PKG = REPO / "sglang_eagle3_ext"


def _files() -> list:
    return sorted(PKG.rglob("*.py"))


def test_phase_labels_and_marker_spelled_once():
    """Each block label is a string literal in window.py only; MARKER is assigned in
    runtime/marker.py only (the same text as the cache folder name in resources.py is another
    name, not the marker)."""
    literals: dict[str, list[str]] = {label: [] for label in window.LABELS.values()}
    marker_defs = []
    for p in _files():
        rel = str(p.relative_to(PKG))
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in literals:
                literals[node.value].append(rel)
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "MARKER" for t in targets):
                    marker_defs.append(rel)
    for label in window.LABELS.values():
        assert literals[label] == ["runtime/probes/window.py"], label
    assert marker_defs == ["runtime/marker.py"]


def test_no_second_phase_tuple():
    """A tuple literal of phase names (draft, verify, ...) outside window.py is a second definition."""
    pat = re.compile(r'\(\s*"draft",\s*"verify"')
    hits = [str(p.relative_to(PKG)) for p in _files()
            if p.name != "window.py" and pat.search(p.read_text(encoding="utf-8"))]
    assert hits == []


def test_users_share_the_objects():
    assert tiers.PHASES is window.ALL_PHASES and metrics.PHASES is window.ALL_PHASES
    assert plot.PHASES is window.PHASES and list(plot.PHASE_LABELS) == list(window.PHASES)
    assert prof_blocks.LABEL_TO_PHASE is window.LABEL_TO_PHASE
    assert dict(profile_tables._LABELS) == window.LABELS
    assert transform.MARKER is patcher.MARKER
    from sglang_eagle3_ext.runtime.plugin import hookplan

    assert hookplan.MARKER is patcher.MARKER


def test_block_labels_parse_back():
    """The block window.py writes is read back by documents.prof_blocks through the same label map."""
    for name, label in window.LABELS.items():
        m = prof_blocks._PHASE_LINE.search(f"  {label + ':':<17}   1.00 ms/cyc  ( 10.0%)")
        assert m and window.LABEL_TO_PHASE[m["label"]] == name
