"""compare: reproduce the seeds' final table from five bench result files holding the seeds' numbers.

The seeds (Kimi-K2.5, 8 GPUs) reported:
| Baseline (no spec, NCCL tuned) | 88.8 | 89.0 | — |
| Baseline (no spec, no NCCL)    | 62.9 | 63.0 | -29% |
| EAGLE3 5-step (no NCCL)        | 71.3 | 75.3 | -20% |
| EAGLE3 5-step + NCCL           | 86.7 | 94.0 | -2.4% |
| EAGLE3 2-step + NCCL           | 94.0 | 96.9 | +5.9% |
The files are built through bench.build_result (the same code that writes real results) from
per-run decode tok/s whose mean and max are those figures.
"""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import jsonio
from sglang_eagle3_ext.measure import bench, chat_client, compare

SEEDS = [
    # label, per-run decode tok/s (avg, peak = seeds), accept length (incl. bonus) or None
    ("Baseline (no spec, NCCL tuned)", [88.6, 88.7, 88.8, 88.9, 89.0], None),
    ("Baseline (no spec, no NCCL)", [62.8, 62.8, 62.9, 63.0, 63.0], None),
    ("EAGLE3 5-step (no NCCL)", [68.3, 69.3, 71.3, 72.3, 75.3], 2.1),
    ("EAGLE3 5-step + NCCL", [80.0, 84.5, 86.0, 89.0, 94.0], 2.1),
    ("EAGLE3 2-step + NCCL", [91.1, 92.0, 94.0, 96.0, 96.9], 1.9),
]


def _doc(label: str, speeds: list[float], al: float | None) -> dict:
    runs = []
    for i, v in enumerate(speeds):
        rec = chat_client.RequestRecord(prompt_index=0, completion_tokens=1000, decode_tok_s=v)
        verify = round(1000 / al) if al else None
        runs.append(bench.RunRecord(
            index=i + 1, wall_s=1000 / v, requests=[rec], decode_tok_s=v, e2e_tok_s=v * 0.99,
            ttft_s=0.1, throughput_tok_s=v * 0.99, completion_tokens=1000,
            accept_length=(1000 / verify) if verify else None,
            accept_source="sglext" if verify else "none", verify_ct=verify))
    return bench.build_result(bench.BenchOptions(url="http://gpu:8000", label=label), "kimi", runs, [])


@pytest.fixture()
def seed_files(tmp_path):
    paths = []
    for i, (label, speeds, al) in enumerate(SEEDS):
        p = tmp_path / f"{i}.json"
        jsonio.write_json(p, _doc(label, speeds, al))
        paths.append(str(p))
    return paths


def test_reproduces_seeds_table(seed_files):
    rs = compare.rows(compare.load(seed_files))
    cells = compare.table_lines(rs)
    assert [c[:3] + [c[4]] for c in cells] == [
        ["Baseline (no spec, NCCL tuned)", "88.8", "89.0", "—"],
        ["Baseline (no spec, no NCCL)", "62.9", "63.0", "-29.2%"],
        ["EAGLE3 5-step (no NCCL)", "71.3", "75.3", "-19.7%"],
        ["EAGLE3 5-step + NCCL", "86.7", "94.0", "-2.4%"],
        ["EAGLE3 2-step + NCCL", "94.0", "96.9", "+5.9%"],
    ]
    assert [c[3] for c in cells] == ["-", "-", "2.10", "2.10", "1.90"]


def test_cli_markdown_and_json(seed_files, capsys):
    assert cli.main(["compare", *seed_files, "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "| EAGLE3 2-step + NCCL | 94.0 | 96.9 | 1.90 | +5.9% |" in md
    assert cli.main(["compare", *seed_files, "--json", "--baseline", "EAGLE3 5-step + NCCL"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {r["config"]: r for r in rows}
    assert by["EAGLE3 5-step + NCCL"]["is_baseline"]
    assert by["EAGLE3 2-step + NCCL"]["vs_baseline_pct"] == pytest.approx((94.0 / 86.7 - 1) * 100)


def test_rich_table_renders(seed_files, capsys):
    assert cli.main(["compare", *seed_files]) == 0
    text = capsys.readouterr().out
    assert "+5.9%" in text and "incl. bonus" in text


def test_errors(seed_files, tmp_path, capsys):
    assert cli.main(["compare", *seed_files, "--baseline", "nope"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    assert cli.main(["compare", str(bad)]) == 2
    assert cli.main(["compare", str(tmp_path / "missing.json")]) == 2
    bad.write_text("{not json")
    assert cli.main(["compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "matches no result" in err and "Traceback" not in err


def test_sweep_results_file_is_accepted(tmp_path):
    docs = [_doc(label, speeds, al) for label, speeds, al in SEEDS[:2]]
    sweep = {"schema": compare.SWEEP_SCHEMA, "configs": [
        {"name": "eagle3 s2 k1 d3", "status": "ok", "baseline": False, "bench": docs[0]},
        {"name": "no-spec", "status": "ok", "baseline": True, "bench": docs[1]},
        {"name": "eagle3 s9", "status": "failed", "baseline": False, "bench": None},
    ]}
    p = tmp_path / "results.json"
    p.write_text(json.dumps(sweep))
    rs = compare.rows(compare.load([str(p)]))
    assert [r["config"] for r in rs] == ["eagle3 s2 k1 d3", "no-spec"]
    assert rs[1]["is_baseline"] and rs[0]["vs_baseline_pct"] == pytest.approx((88.8 / 62.9 - 1) * 100)
