"""`sgl-eagle3 calibrate` on the H200 round-11 files: a scan's cycle costs moved to open-loop
traffic by one server's probes must predict ANOTHER server's measured cycles (static 3 predicts
static 7 and back, MoE shape), and flip the batch-8 ranking the way the two servers measured it.
Real files, no GPU needed: the probes were recorded on the H200 (docs/results.md, round 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import prof_records, scan_doc
from sglang_eagle3_ext.measure.accounting import by_key_summary
from sglang_eagle3_ext.runtime.policy import table_from_doc
from sglang_eagle3_ext.tune.calibrate import best_by_bs, calibrate, measured_keys

R11 = Path(__file__).resolve().parent.parent / "docs/data/h200-2026-12-04-r11/r11"
SCAN_MOE = R11 / "scan-moe.json"


def probes(server: str) -> Path:
    (f,) = (R11 / server / "configs").glob("*/prof.jsonl")
    return f


def keys(server: str) -> dict[tuple[int, int], tuple[float, int]]:
    return measured_keys(by_key_summary(prof_records.load(probes(server)).records), None)


def rows_of(server: str) -> tuple[dict, list[dict]]:
    recs = prof_records.load(probes(server)).records
    return calibrate(scan_doc.load(SCAN_MOE), by_key_summary(recs), sources=[server])


@pytest.mark.parametrize(("source", "truth", "steps"), [("static3-moe", "static7-moe", 7),
                                                        ("static7-moe", "static3-moe", 3)])
def test_one_server_predicts_the_other(source: str, truth: str, steps: int) -> None:
    """Where the scan measured the step count itself (its levels, batch 1 and 8), the scan's ms
    plus the offset seen on one static server lands within 3 % of the other server's own cycles;
    the raw scan is 4-20 % off there."""
    _, rows = rows_of(source)
    real = keys(truth)
    for bs in (1, 8):
        r = next(x for x in rows if x["bs"] == bs and x["steps"] == steps)
        assert r["basis"] == "offset"
        got, want = r["ms"], real[(steps, bs)][0]
        assert abs(got / want - 1) < 0.03, (bs, got, want)
        assert abs(r["scan_ms"] / want - 1) > 0.04  # the uncalibrated table misses by more


def test_batch_8_ranking_flips_as_the_servers_measured() -> None:
    """The scan ties 3 and 7 steps at batch 8 and picks 3; in the traffic static 7 ran 8 % faster
    per stream than static 3 (cycles x accept length of both servers): calibrated, 7 wins."""
    _, rows = rows_of("static3-moe")
    assert best_by_bs(rows, "scan_rate")[8] == 3
    assert best_by_bs(rows, "rate")[8] == 7
    s3, s7 = keys("static3-moe")[(3, 8)][0], keys("static7-moe")[(7, 8)][0]
    assert 4.10 / s7 > 2.90 / s3  # the servers' accept lengths at batch 8 (profile tables)


def test_calibrated_file_reads_as_a_scan(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cal.json"
    rc = cli.main(["calibrate", str(SCAN_MOE), str(probes("policy-moe")), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "changed at" in text and "wrote" in text
    doc = scan_doc.load(out)  # the bounded read and typed check launch --policy uses
    table = table_from_doc(doc)
    assert table.candidates == [3, 4, 5, 6, 7]
    cal = doc["calibration"]
    assert set(map(int, cal["offsets"])) == set(doc["levels"]) and cal["beyond_scan"] == []
    # the policy ran 7 steps at batch 1 for 400+ steady cycles: its own mean is kept there
    c = next(c for c in doc["cells"] if c["bs"] == 1 and c["steps"] == 7)
    assert c["calibrated"] == "measured"
    assert abs(c["cycle_ms"] - keys("policy-moe")[(7, 1)][0]) < 1e-3
    assert scan_doc.table(doc)[8][7] > scan_doc.table(doc)[8][3]
    # the scan ran 7 steps at its levels 1 and 8 only: batch 4 rests on its line, and says so
    c4 = next(c for c in doc["cells"] if c["bs"] == 4 and c["steps"] == 7)
    assert c4["calibrated"] == "offset-interpolated"
    assert "rest on the scan's line" in text


def run_cli(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main([str(a) for a in args])
    c = capsys.readouterr()
    assert "Traceback" not in c.err
    if rc:
        lines = [x for x in c.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), c.err
    return rc, c.err


def test_probes_of_another_model_are_refused(tmp_path: Path, capsys) -> None:
    """8B probes against the MoE scan: cycles less than half the scan's: refused, nothing written."""
    out = tmp_path / "cal.json"
    rc, err = run_cli(capsys, "calibrate", SCAN_MOE, probes("static5"), "--out", out)
    assert rc == 2 and "more than 50% apart" in err and not out.exists()


def test_no_shared_step_count_and_bad_flags(tmp_path: Path, capsys) -> None:
    recs = [json.loads(x) for x in probes("static5").read_text().splitlines() if x.strip()]
    doc = json.loads(SCAN_MOE.read_text())
    doc["cells"] = [c for c in doc["cells"] if c["steps"] != 5 and c.get("level") == c["bs"]]
    doc["candidates"] = [s for s in doc["candidates"] if s != 5]
    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(doc))
    prof = tmp_path / "prof.jsonl"
    prof.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    out = tmp_path / "cal.json"
    rc, err = run_cli(capsys, "calibrate", scan, prof, "--out", out)
    assert rc == 2 and "nothing to calibrate from" in err and not out.exists()
    rc, err = run_cli(capsys, "calibrate", SCAN_MOE, probes("static3-moe"), "--out", out, "--min-cycles", "0")
    assert rc == 2 and "--min-cycles" in err
    rc, err = run_cli(capsys, "calibrate", SCAN_MOE, tmp_path / "missing.jsonl", "--out", out)
    assert rc != 0 and not out.exists()
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)) * 8)
    rc, err = run_cli(capsys, "calibrate", SCAN_MOE, tmp_path / "bin.jsonl", "--out", out)
    assert rc != 0 and not out.exists()
    before = scan.read_bytes()  # --out onto an input: refused, the input byte-identical
    rc, err = run_cli(capsys, "calibrate", scan, probes("static3-moe"), "--out", scan)
    assert rc == 2 and "is the input" in err and scan.read_bytes() == before


def test_profile_points_to_calibrate_only_where_the_table_misses(capsys) -> None:
    """`profile` on round 11's policy file (open-loop churn: -15 %) names the command; on round 8's
    MoE policy file (closed loop, the scan's own kind of traffic) it stays quiet."""
    rc = cli.main(["profile", str(probes("policy-moe"))])
    err = capsys.readouterr().err
    assert rc == 0 and "less per stream than its table expected" in err and "sgl-eagle3 calibrate" in err
    (r8,) = (R11.parent.parent / "h200-2026-12-02-r8/moe5/policy/configs").glob("*/prof.jsonl")
    rc = cli.main(["profile", str(r8)])
    err = capsys.readouterr().err
    assert rc == 0 and "calibrate" not in err


def test_sizes_the_probes_never_saw_keep_the_scan(tmp_path: Path, capsys) -> None:
    """Round 4's 8B scan has a level at 32 streams; round 11's 8B servers ran at most 16: batch 32
    keeps the scan's own figures (no offset guessed), 1-16 move, and the output says which."""
    out = tmp_path / "cal.json"
    rc = cli.main(["calibrate", str(R11 / "scan-8b.json"), str(probes("static5")), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "the probes never ran there" in text
    doc = scan_doc.load(out)
    scan = table_from_doc(scan_doc.load(R11 / "scan-8b.json"))
    at32 = [c for c in doc["cells"] if c["bs"] == 32]
    assert at32 and all(c["calibrated"] == "uncalibrated" for c in at32)
    assert all(abs(c["cycle_ms"] - scan.cycle_ms(c["steps"], 32)) < 1e-3 for c in at32)
    at16 = next(c for c in doc["cells"] if c["bs"] == 16 and c["steps"] == 5)
    assert at16["calibrated"] == "measured" and at16["cycle_ms"] > scan.cycle_ms(5, 16) + 1.0
