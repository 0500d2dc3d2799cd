"""The scan grid: state x batch size, the best per batch size marked; written as scan.png beside
scan.json by a real `scan` run (the stand-in server of test_scan), or one line saying why not."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
from test_scan import scanned  # noqa: F401  (one stand-in scan, module scope)

from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.measure import plot_base
from sglang_eagle3_ext.measure.plot_scan import PLAIN, draw_beside, grid, plot_scan, state_label

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
R8 = DATA / "h200-2026-12-02-r8" / "8bp"  # steps 0-5 x batch sizes 1, 8, 32 (H200, 8B shape)
MOE = DATA / "h200-2026-12-02-r8" / "moe5" / "scan-moe"  # the best state differs between tiers


def test_grid_of_a_recorded_scan_matches_its_best_per_tier():
    for folder in (R8, MOE):
        doc = scan_doc.load(folder)
        g = grid(doc)
        assert g["sizes"] == doc["levels"]
        assert g["states"] == [state_label({"steps": s}) for s in doc["candidates"]]
        # the grid's best per batch size is the scan's own best static count there
        assert {str(bs): s for bs, s in g["best"].items()} == {
            k: state_label({"steps": v["steps"]}) for k, v in doc["best"].items() if k != "overall"}
    assert grid(scan_doc.load(MOE))["best"] == {1: "4 steps", 8: "3 steps"}


def test_tree_states_and_any_state_label():
    """Cells of tree states (topk > 1) and cells naming their state get their own rows, chains first."""
    doc = copy.deepcopy(scan_doc.load(R8))
    base = [c for c in scan_doc.main_cells(doc) if c["steps"] == 3]
    tree = [dict(c, topk=4, draft_tokens=21, steps=5, per_stream_tok_s=c["per_stream_tok_s"] * 2) for c in base]
    named = [dict(c, state="c9", steps=9, per_stream_tok_s=1.0) for c in base]
    labelled = [dict(c, state="3x8x25", steps=3, per_stream_tok_s=2.0) for c in base]  # a label, no topk
    doc["cells"] += tree + named + labelled
    g = grid(doc)
    assert g["states"][-4:] == ["5 steps", "c9", "3x8x25", "5x4x21"] and "3 steps" in g["states"]
    assert set(g["best"].values()) == {"5x4x21"}  # twice the 3-step rate: the best everywhere
    assert state_label({"steps": 4, "state": "4"}) == "4 steps" and state_label({"steps": 0}) == "step 0 (SGLang)"
    # a tie goes to fewer steps, then to the chain (the scan's own rule for its best per tier)
    tie = [{"steps": 5, "bs": 1, "level": 1, "cycles": 9, "per_stream_tok_s": 100.0},
           {"steps": 3, "topk": 8, "draft_tokens": 25, "bs": 1, "level": 1, "cycles": 9, "per_stream_tok_s": 100.0},
           {"steps": 3, "bs": 1, "level": 1, "cycles": 9, "per_stream_tok_s": 99.0}]
    assert grid({"cells": tie})["best"] == {1: "3x8x25"}
    assert grid({"cells": [*tie[:2], dict(tie[2], per_stream_tok_s=100.0)]})["best"] == {1: "3 steps"}
    assert plot_scan(doc, io.BytesIO()) is not None


def test_plain_row_and_picture(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    doc = copy.deepcopy(scan_doc.load(R8))
    doc["baseline"] = {"1": {"per_stream_tok_s": 200.0, "throughput_tok_s": 200.0},
                       "8": {"per_stream_tok_s": 190.0, "throughput_tok_s": 1520.0}}
    assert grid(doc)["plain"] == {1: 200.0, 8: 190.0}
    p = plot_scan(doc, tmp_path / "scan.png")
    with Image.open(p) as im:
        assert im.format == "PNG" and im.width > 500 and im.height > 400
    assert PLAIN.startswith("plain")


def test_the_scan_command_draws_its_grid(scanned):  # noqa: F811
    """`scan` writes scan.png beside scan.json and says so."""
    assert scanned["rc"] == 0
    png = scanned["out"] / "scan.png"
    if plot_base.missing_reason():
        assert not png.exists() and "scan.png not drawn: matplotlib" in scanned["stdout"]
        return
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"wrote {png}" in scanned["stdout"]


def test_without_matplotlib_one_line_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(plot_base, "missing_reason", lambda: "matplotlib is not installed: pip install x")
    doc = scan_doc.load(R8)
    assert draw_beside(doc, tmp_path) == "scan.png not drawn: matplotlib is not installed: pip install x"
    assert not (tmp_path / "scan.png").exists()
    assert draw_beside({"cells": []}, tmp_path) is None  # nothing measured: nothing to say


def test_a_large_grid_stays_a_readable_picture(tmp_path):
    """45 states, or 14 batch sizes: the picture is capped at 20 inches (2400 px at 120 dpi) a side."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    def cells(states, sizes):
        return [{"steps": s, "bs": bs, "level": bs, "cycles": 100, "blocks": 4, "per_stream_tok_s": 100.0 + s + bs}
                for s in range(1, states + 1) for bs in range(1, sizes + 1)]

    tall, wide = cells(45, 2), cells(2, 14)
    assert len(grid({"cells": tall})["states"]) == 45 and grid({"cells": wide})["best"][14] == "2 steps"
    with Image.open(plot_scan({"cells": tall}, tmp_path / "tall.png")) as im:
        assert im.height == 2400 and im.width < 2400
    with Image.open(plot_scan({"cells": wide}, tmp_path / "wide.png")) as im:
        assert im.width == 2400 and im.height < 2400
