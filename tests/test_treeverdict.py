"""Chain-or-tree verdict (treeverdict.py) and the sweep's matrix.trees axis, on real sweep
documents written the way sweep.py writes them (configs with ladders), and the real spec loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.tune import sweep, treeverdict

REPO = Path(__file__).resolve().parents[1]


def _cfg(name, steps, topk, dt, ladder):
    return {"name": name, "slug": name.replace(" ", "-"), "status": "ok", "baseline": False,
            "steps": steps, "topk": topk, "draft_tokens": dt,
            "ladder": {"levels": [{"concurrency": c, "summary": {"per_stream_tok_s": t,
                                                                 "accept_length": a}}
                                  for c, t, a in ladder]}}


def _doc():
    return {"configs": [
        {"name": "no-spec", "slug": "no-spec", "status": "ok", "baseline": True},
        _cfg("eagle3 s3 k1 d4", 3, 1, 4, [(1, 400.0, 2.50), (8, 300.0, 2.50), (32, 200.0, 2.50)]),
        _cfg("eagle3 s3 k4 d13", 3, 4, 13, [(1, 440.0, 2.81), (8, 290.0, 2.81), (32, 150.0, 2.81)]),
    ]}


def test_verdict_per_batch_size_and_why():
    v = treeverdict.verdict(_doc())
    by = {r["batch_size"]: r for r in v["levels"]}
    assert by[1]["winner"] == "tree s3 k4 d13" and by[1]["gain_pct"] == pytest.approx(10.0)
    assert by[8]["winner"] == "chain s3" and by[32]["gain_pct"] == pytest.approx(-25.0)
    # per-stream = accept x 1000 / cycle: the implied cycle ratio reproduces the gain exactly
    r = by[32]
    assert r["accept_ratio"] / r["cycle_ratio"] - 1 == pytest.approx(r["gain_pct"] / 100, abs=1e-3)
    assert "crossover" in v["summary"] and "1 streams" in v["summary"]
    text = "\n".join(treeverdict.lines(v))
    assert "x1.12 tokens per verify" in text and "implied by the client" in text


def test_no_tree_no_verdict():
    doc = _doc()
    doc["configs"] = doc["configs"][:2]
    assert treeverdict.verdict(doc) is None


def test_example_sweep_expands_trees():
    spec = sweep.load_spec(REPO / "examples" / "sweep-trees.yaml")
    got = [(c.steps, c.topk, c.draft_tokens) for c in spec.configs if not c.baseline]
    assert got == [(3, 1, 4), (5, 1, 6), (3, 2, 7), (3, 4, 13), (5, 4, 21), (5, 8, 21)]


@pytest.mark.parametrize("bad", ["[3, 4]", "[3, 1, 7]", "[2, 2, 9]", "[3, true, 5]"])
def test_bad_trees_item_is_one_line(tmp_path, bad):
    p = tmp_path / "s.yaml"
    p.write_text(f"name: t\npreset: tiny\nmatrix:\n  trees: [{bad}]\n")
    with pytest.raises(UserError) as e:
        sweep.load_spec(p)
    assert "matrix.trees" in str(e.value) and e.value.exit_code == 2
