"""compare on hostile open-loop inputs: repeats paired by run (not by position), one run given
twice, runs of different workloads, documents that contradict themselves, out-of-range figures.
Built from a real recorded H100 run (round 13)."""

from __future__ import annotations

import copy
import itertools
import json
import shutil
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import jsonio
from sglang_eagle3_ext.measure import compare, serving_repeats

REPO = Path(__file__).resolve().parents[1]
BASE = REPO / "docs/data/h100-2026-12-06-r13/r13a/static5/serving-r16-k0.json"


_RUNS = itertools.count()


def _doc(label: str, tok: dict[float, float], **params) -> dict:
    """One run of ``label`` at the rates of ``tok`` (rate -> output tok/s); each its own span."""
    d = json.loads(BASE.read_text())
    entry = d["rates"][0]
    d["rates"] = []
    for rate, t in tok.items():
        e = copy.deepcopy(entry)
        e["request_rate"] = rate
        shift = 100.0 * next(_RUNS)
        e["span"] = [e["span"][0] + shift, e["span"][1] + shift]
        e["summary"]["output_throughput"] = t
        d["rates"].append(e)
    d["label"] = label
    d["params"].update(params)
    return d


def _write(tmp_path: Path, docs: list[dict]) -> list[str]:
    files = []
    for i, d in enumerate(docs):
        jsonio.write_json(tmp_path / f"{i}.json", d)
        files.append(str(tmp_path / f"{i}.json"))
    return files


def test_a_run_missing_a_rate_leaves_it_unpaired_not_every_later_pair_shifted(tmp_path):
    """A and B alternate three times at 10 and 20 req/s; A's second run has no 20 req/s (it
    stopped early). B equals A run for run (0 %): by position, A run 3 met B run 2 (+25 %)."""
    a = [{10: 100.0, 20: 200.0}, {10: 110.0}, {10: 120.0, 20: 250.0}]
    b = [{10: 100.0, 20: 200.0}, {10: 110.0, 20: 200.0}, {10: 120.0, 20: 250.0}]
    docs = [_doc(lbl, t) for pair in zip(a, b, strict=True) for lbl, t in zip("AB", pair, strict=True)]
    rows = serving_repeats.repeat_rows(compare.load_serving_set(_write(tmp_path, docs)), "B")
    at20 = next(r for r in rows if r["config"] == "A" and r["request_rate"] == 20)
    p = at20["output_throughput_vs_baseline_pct"]
    assert p["pairs"] == 2 and p["mean"] == pytest.approx(0.0) and at20["runs"] == 2
    at10 = next(r for r in rows if r["config"] == "A" and r["request_rate"] == 10)
    assert at10["output_throughput_vs_baseline_pct"]["pairs"] == 3


def test_one_file_per_rate_runs_pair_by_run(tmp_path):
    """A campaign writes one file per label and rate: A's second 20 req/s file is missing; its
    third run still meets B's third."""
    a = [{10: 100.0}, {20: 200.0}, {10: 110.0}, {10: 120.0}, {20: 240.0}]
    b = [{10: 100.0}, {20: 200.0}, {10: 110.0}, {20: 220.0}, {10: 120.0}, {20: 240.0}]
    docs = [_doc("A", t) for t in a] + [_doc("B", t) for t in b]
    assert serving_repeats.run_ids(docs) == [0, 0, 1, 2, 2, 0, 0, 1, 1, 2, 2]
    rows = serving_repeats.repeat_rows(compare.load_serving_set(_write(tmp_path, docs)), "B")
    at20 = next(r for r in rows if r["config"] == "A" and r["request_rate"] == 20)
    assert at20["output_throughput_vs_baseline_pct"]["mean"] == pytest.approx(0.0)


@pytest.mark.parametrize("how", ["same path", "copy", "relabelled copy"])
def test_a_run_given_twice_is_refused(tmp_path, capsys, how):
    """Twice the same run would make a zero-width interval that claims a difference."""
    files = _write(tmp_path, [_doc("A", {16: 100.0}), _doc("B", {16: 110.0})])
    if how == "same path":
        extra = files[1]
    else:
        extra = str(tmp_path / "copy.json")
        shutil.copy(files[1], extra)
        if how == "relabelled copy":
            d = json.loads(Path(extra).read_text())
            d["label"] = "C"
            Path(extra).write_text(json.dumps(d))
    rc = cli.main(["compare", *files, extra, "--repeats"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "the same measurements" in err, err
    assert ("given twice" if how == "same path" else f"a copy of {files[1]}") in err


@pytest.mark.parametrize("param,value", [("max_tokens", 256), ("api", "generate"), ("seed", 7),
                                         ("prompts_file", "/other/prompts.json"),
                                         ("slo_ms", {"ttft": 1000.0, "tpot": 6.0})])
def test_different_workloads_are_refused_unless_forced(tmp_path, capsys, param, value):
    docs = [_doc("A", {16: 100.0}), _doc("B", {16: 110.0}, **{param: value})]
    if param == "api":
        docs[0]["params"]["api"] = "chat"
    files = _write(tmp_path, docs)
    for extra in ([], ["--repeats"]):
        rc = cli.main(["compare", *files, *extra])
        err = capsys.readouterr().err
        assert rc == 2 and f"B: another workload than the baseline A ({param} " in err and "--force" in err, err
        assert len(err.strip().splitlines()) == 1
    assert cli.main(["compare", *files, "--force"]) == 0
    cap = capsys.readouterr()
    assert "warning: B: another workload" in cap.err and "| 16" not in cap.err


@pytest.mark.parametrize("field,value,needle", [
    ("completed", 10**6, "summary.completed 1000000 > summary.sent"),
    ("failed", 10**6, "summary.failed 1000000 > summary.sent"),
    ("goodput.slo_attainment", 7.5, "slo_attainment 7.5 > 1"),
    ("goodput.request_goodput", 1000.0, "request_goodput 1000.0 > request_throughput"),
])
def test_a_document_that_contradicts_itself_is_refused(tmp_path, capsys, field, value, needle):
    d = _doc("A", {16: 100.0})
    s = d["rates"][0]["summary"]
    if "." in field:
        s["goodput"][field.split(".")[1]] = value
    else:
        s[field] = value
    files = _write(tmp_path, [d, _doc("B", {16: 110.0})])
    rc = cli.main(["compare", *files])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "contradicts itself" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("where", ["request_rate", "output_throughput"])
def test_a_huge_figure_is_not_called_negative(tmp_path, capsys, where):
    """1e308 is > 0: the line says it is out of range, not that it is not > 0."""
    d = _doc("A", {16: 100.0})
    if where == "request_rate":
        d["rates"][0]["request_rate"] = 1e308
    else:
        d["rates"][0]["summary"]["output_throughput"] = 1e308
    rc = cli.main(["compare", *_write(tmp_path, [d])])
    err = capsys.readouterr().err
    assert rc == 2 and f"{where} must be below" in err and "> 0" not in err and ">= 0" not in err, err
