"""`sgl-eagle3 profile` and profile_log: the seeds' exact text, our blocks/JSONL, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import accounting
from sglang_eagle3_ext.runtime.errors import UserError

DATA = Path(__file__).resolve().parent / "data" / "profile"
REPO = DATA.parent.parent.parent
SEEDS = DATA / "seeds_002_excerpt.log"  # verbatim from ../shared/seeds/002_*.txt (grep | tail cut it)
DESIGN = DATA / "design_block.log"  # the block quoted in DESIGN.md
SYNTH = DATA / "synthetic_k5.jsonl"  # written by the probes (scripted clock), steps 5 topk 1


def test_seed_blocks_parse_to_their_exact_numbers():
    run = prof_records.load(SEEDS)
    assert run.kind == "log" and len(run.records) == 2
    a, b = run.records
    # block 1: header cut off by `tail -20`
    assert a["cycles"] is None and a["mode"] == "wall"
    assert [a["phases"][p]["mean_ms"] for p in ("draft", "verify", "extend", "other", "cycle")] == \
        [2.18, 28.45, 1.12, 0.00, 31.74]
    assert a["legacy"] == {"accept_len_drafts_only": 0.98, "eff_tok_s_drafts_only": 31.0}
    assert a["accept_len"] == 1.98 and a["eff_tok_s"] == round(1.98 * 1000 / 31.74, 2)
    # block 2: "TOTAL: 3..." cut off
    assert (b["cycles"], b["accepted_drafts"], b["requests"]) == (400, 394, 400)
    assert [b["phases"][p]["mean_ms"] for p in ("draft", "verify", "extend", "other")] == [2.19, 28.44, 1.13, 0.00]
    assert b["phases"]["cycle"]["mean_ms"] == 31.76 and b["accept_len"] == 1.985
    assert any("TOTAL line is cut off" in n for n in run.notes)
    assert sum("legacy block counted accepted drafts only" in n for n in run.notes) == 2


def test_design_block_converts_to_1_985_tokens_and_62_5_tok_s():
    run = prof_records.load(DESIGN)
    (r,) = run.records
    assert (r["cycles"], r["accepted_drafts"], r["phases"]["cycle"]["mean_ms"]) == (400, 394, 31.74)
    assert r["accept_len"] == 1.985 and round(r["eff_tok_s"], 1) == 62.5
    (note,) = run.notes
    assert "Accept len 0.98 -> 1.985 tokens per cycle incl. bonus (394/400 + 1)" in note
    assert "Eff tok/s 31.0 -> 62.5" in note


def test_profile_cli_side_by_side_with_break_even(capsys):
    rc = cli.main(["profile", str(DESIGN), str(SYNTH), "--baseline-tps", "88.8"])
    cap = capsys.readouterr()
    assert rc == 0
    for text in ("design_block.log", "synthetic_k5.jsonl", "Break-even accept len @ 88.8 tok/s",
                 "2.82", "2.25", "1.985", "2.100", "events", "wall", "incl. the bonus token"):
        assert text in cap.out, text
    assert "converted Accept len 0.98 -> 1.985" in cap.err


def test_profile_json_and_predict():
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "profile", str(SYNTH), str(DESIGN),
                        "--baseline-tps", "88.8", "--json", "--all-windows"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    synth, design = doc["files"]
    assert design["break_even_accept_len"] == round(31.74 * 88.8 / 1000, 4)
    assert design["margin_accept_len"] == round(1.985 - 31.74 * 88.8 / 1000, 4)
    assert synth["windows"] == 3 and synth["cycles"] == 300 and synth["accept_len"] == 2.1
    assert synth["per_position"] == [0.6, 0.5, 0.333333, 1.0, 0.0]
    assert synth["spec"] == {"steps": 5, "topk": 1, "draft_tokens": 6}


def test_profile_predict_table(capsys):
    rc = cli.main(["profile", str(SYNTH), "--predict", "--baseline-step-ms", "12.5", "--json"])
    assert rc == 0
    pred = json.loads(capsys.readouterr().out)["predictions"][str(SYNTH)]
    rows = {r["steps"]: r for r in pred["rows"]}
    # draft 2.19 ms / 5 steps; verify+extend+other = 21.7 + 1.13 + 0.3
    assert rows[2]["accept_len"] == pytest.approx(1.9) and rows[2]["cycle_ms"] == pytest.approx(23.13 + 2 * 0.438)
    assert rows[5]["kind"] == "measured" and rows[5]["accept_len"] == pytest.approx(2.1)
    assert rows[0]["tok_s"] == pytest.approx(80.0)
    assert pred["recommendation"].startswith("Run --speculative-num-steps 4 ")
    rc = cli.main(["profile", str(SYNTH), "--predict", "--baseline-tps", "80"])
    out = capsys.readouterr().out
    assert rc == 0 and "Prediction from" in out and "measured" in out and "Run --speculative-num-steps 4" in out


@pytest.mark.parametrize("content,expect", [
    ("nothing to see here\n", "no EAGLE3_PROF block and no eagle3_prof JSONL record found"),
    ('{"schema": "eagle3_prof/1", "cycles": 1\n', ":1: not valid JSON"),
    ('{"schema": "other/2"}\n', "schema is 'other/2'"),
    ('{"schema": "eagle3_prof/1", "cycles": 1, "mode": "wall", "phases": {}}\n', "phases must hold mean_ms"),
    ("EAGLE3_PROF (10 cycles, 5 tok accepted)\n  Draft steps:        2.19 ms/cyc  (  6.9%)\n",
     "lacks verify, extend, other and TOTAL"),
])
def test_malformed_file_one_clear_line_nonzero_exit(tmp_path, capsys, content, expect):
    f = tmp_path / "bad.log"
    f.write_text(content)
    rc = cli.main(["profile", str(f)])
    cap = capsys.readouterr()
    assert rc != 0 and cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], cap.err


def test_missing_file_and_legacy_predict_are_user_errors(tmp_path, capsys):
    assert cli.main(["profile", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["profile", str(DESIGN), "--predict"]) == 2
    assert "no per-position acceptance" in capsys.readouterr().err
    assert cli.main(["profile", str(DESIGN), "--baseline-tps", "-3"]) == 2
    with pytest.raises(UserError):
        prof_records.load(DATA / "malformed.txt")


def test_summary_leaves_the_warm_up_window_out_by_default():
    """Window 1 holds the process's first cycles (SGLang's warm-up request); it is dropped, and said."""
    run = prof_records.load(SYNTH)
    kept = accounting.summarize(run, all_windows=True)
    default = accounting.summarize(run)
    assert kept["windows"] == 3 and default["windows"] == 2
    assert default["cycles"] == kept["cycles"] - run.records[0]["cycles"]
    assert any("window 1" in n for n in default["notes"])


def test_profile_reports_the_probes_own_read_cost(tmp_path, capsys):
    """Records written by the real profiler carry its measured read cost per window; `profile`
    turns it into us per cycle (FakeEventTimer stands in for CUDA events: no GPU here)."""
    from sglang_eagle3_ext.runtime import probes
    from sglang_eagle3_ext.runtime.probes import timers

    out = tmp_path / "prof.jsonl"
    probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "10",
                          "EAGLE3_PROFILE_OUT": str(out)}, backend=timers.FakeEventTimer())
    try:
        for _ in range(31):
            probes.cycle_begin()
            for name in ("draft", "verify", "extend"):
                probes.phase_begin(name)
                probes.phase_end(name)
            probes.record_accept([1], bonus_included=False)
            probes.cycle_end()
        probes.cycle_begin()
    finally:
        probes.reset(environ={})
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == 3 and all(r["probe_read_ms"] > 0 and r["probe_wait_ms"] >= 0 for r in recs)
    s = accounting.summarize(prof_records.load(out))
    want = 1000.0 * sum(r["probe_read_ms"] + r["probe_wait_ms"] for r in recs[1:]) / 20
    assert s["probe_read_us_per_cycle"] == pytest.approx(want, abs=0.01)
    assert cli.main(["profile", str(out)]) == 0
    assert "Probe read cost" in capsys.readouterr().out
    assert cli.main(["profile", str(SYNTH)]) == 0  # older records: no such row
    assert "Probe read cost" not in capsys.readouterr().out
