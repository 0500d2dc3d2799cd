"""profile on a real H200 ladder (docs/data/h200-2026-12-01/8b-p08, SGLang 0.5.16, llama3-8b shape,
P 0.8, one server per step count, bench --concurrency 1,8,32): nothing is faked.

The probe file of one config holds three batch sizes; the headline says it is a mix, break-even
and --predict come per batch size, and --bench takes the ladder document (every level compared
with the windows written while it ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli

RUN = Path(__file__).resolve().parents[1] / "docs/data/h200-2026-12-01/8b-p08/p08/configs"


def _cfg(steps: int) -> Path:
    return RUN / f"eagle3-s{steps}-k1-d{steps + 1}-no-nccl"


def _ladder(steps: int) -> dict[int, float]:
    doc = json.loads((_cfg(steps) / "ladder.json").read_text())
    return {lv["concurrency"]: lv["summary"]["per_stream_tok_s"] for lv in doc["levels"]}


def test_bench_ladder_every_level_within_2_percent(capsys):
    d = _cfg(2)
    assert cli.main(["profile", str(d / "prof.jsonl"), "--bench", str(d / "ladder.json"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["agreement"][str(d / "prof.jsonl")]
    levels = {lv["client"]["concurrency"]: lv for lv in got["ladder"]}
    assert sorted(levels) == [1, 8, 32]
    for n, lv in levels.items():
        assert lv["basis"] == f"steady batch-{n}"
        assert abs(lv["decode_tok_s"]["diff_pct"]) < 2.0, (n, lv["decode_tok_s"])


def test_predict_per_batch_size_from_one_ladder_file(capsys):
    """From the 5-step server's file, 4 steps predicted per batch size within 3 % of the 4-step
    server's client at that load (one mixed prediction put 2 steps 18 % off in the issue)."""
    d = _cfg(5)
    assert cli.main(["profile", str(d / "prof.jsonl"), "--predict", "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)["predictions"]
    by = {v["key"]: {r["steps"]: r["tok_s"] for r in v["rows"]} for v in preds.values()}
    assert set(by) == {"batch 1", "batch 8", "batch 32"}
    measured = _ladder(4)
    for n in (1, 8, 32):
        assert by[f"batch {n}"][4] == pytest.approx(measured[n], rel=0.03), n


def test_headline_says_mix_and_break_even_per_batch_size(capsys, monkeypatch):
    from sglang_eagle3_ext.commands import console

    monkeypatch.setattr(console.out, "width", 250)
    assert cli.main(["profile", str(_cfg(2) / "prof.jsonl"), "--baseline-tps", "200"]) == 0
    text = capsys.readouterr().out
    assert "a MIX of 3 batch sizes (1, 8, 32): figures per batch size below" in text
    assert "per batch size (table below)" in text and "break-even @ 200" in text
