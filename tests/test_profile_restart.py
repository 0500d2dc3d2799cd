"""A probe file a restarted server appended to holds two processes' windows, each counting from
window 1: every process's warm-up window is left out (was: only the file's first, while the note
said "window 1 left out"), and calibrate / launch see such files for what they are."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import accounting

SYNTH = Path(__file__).parent / "data" / "profile" / "synthetic_k5.jsonl"


def _restarted(tmp_path: Path, slow_ms: float = 250.0) -> Path:
    """Two processes' streams in one file: windows 1,2,3 then 1,2,3 again; each window 1 slow."""
    recs = [json.loads(line) for line in SYNTH.read_text().splitlines() if line.strip()]
    warm = json.loads(json.dumps(recs[0]))
    warm["phases"]["cycle"]["mean_ms"] = slow_ms
    lines = [warm, *recs[1:], warm, *recs[1:]]
    p = tmp_path / "restarted.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return p


def test_each_process_warm_up_window_is_left_out(tmp_path):
    run = prof_records.load(_restarted(tmp_path))
    one = accounting.summarize(prof_records.load(SYNTH))
    both = accounting.summarize(run)
    assert both["windows"] == 4 and both["cycles"] == 2 * one["cycles"]
    assert both["phases"]["cycle"]["mean_ms"] == one["phases"]["cycle"]["mean_ms"]  # no 250 ms warm-up in it
    assert any("window 1 of each of 2 server processes" in n for n in both["notes"])
    assert accounting.summarize(run, all_windows=True)["windows"] == 6


def test_profile_cli_tok_s_is_the_steady_figure_after_a_restart(tmp_path, capsys):
    path = _restarted(tmp_path)
    assert cli.main(["profile", str(SYNTH), "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert cli.main(["profile", str(path), "--json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    pick = lambda d: d["files"][0]["eff_tok_s"]  # noqa: E731
    assert pick(merged) == pick(single)


def test_only_window_ones_are_all_kept():
    recs = [{"window": 1}, {"window": 1}]
    assert prof_records.warmup_windows(recs) == []
    assert prof_records.warmup_windows([{"window": 3}, {"window": 1}, {"window": 2}]) == [1]


# ------------------------------------------------------------------ calibrate: each server's cycles once

R11 = Path(__file__).resolve().parent.parent / "docs/data/h200-2026-12-04-r11/r11"


def _calibrated(tmp_path: Path, capsys, *probes: Path) -> tuple[dict, str]:
    out = tmp_path / f"cal{len(list(tmp_path.iterdir()))}.json"
    rc = cli.main(["calibrate", str(R11 / "scan-moe.json"), *map(str, probes), "--out", str(out), "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads(out.read_text()), cap.err


def _with_rank(src: Path, dest: Path, rank: int) -> Path:
    """A TP rank's stream of the same server: the same windows, its own rank (and its own GPU's
    timings, here 1 % slower)."""
    lines = []
    for line in src.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            r["rank"] = rank
            r["phases"]["cycle"]["mean_ms"] *= 1.01
            lines.append(json.dumps(r))
    dest.write_text("\n".join(lines) + "\n")
    return dest


def test_calibrate_counts_a_probe_file_given_twice_a_copy_or_a_rank_sibling_once(tmp_path, capsys):
    (prof,) = (R11 / "policy-moe" / "configs").glob("*/prof.jsonl")
    one, _ = _calibrated(tmp_path, capsys, prof)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(prof.read_bytes())
    sibling = _with_rank(prof, tmp_path / "prof.jsonl.rank1", 1)
    renamed = _with_rank(prof, tmp_path / "other-name.jsonl", 2)
    for extra in ([prof], [copy], [sibling], [renamed, sibling]):
        doc, err = _calibrated(tmp_path, capsys, prof, *extra)
        assert doc["cells"] == one["cells"], extra
        assert doc["calibration"]["offsets"] == one["calibration"]["offsets"]
        assert "every window already read" in err and "counted once" in err


def test_distinct_records_keeps_two_servers_apart():
    from sglang_eagle3_ext.tune.calibrate import distinct_records

    a = prof_records.load(SYNTH)
    b = prof_records.load(SYNTH)
    for r in b.records:
        r["time"] = "2030-01-01T00:00:00+00:00"  # another server's windows: kept
    recs, notes = distinct_records([a, b])
    assert len(recs) == len(a.records) + len(b.records) and notes == []
