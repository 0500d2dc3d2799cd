"""records.py: checked typed views of the four record kinds, round trip over every committed sample."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

from sglang_eagle3_ext.documents import records
from sglang_eagle3_ext.documents.bench_doc import LADDER_SCHEMA
from sglang_eagle3_ext.documents.bench_doc import SCHEMA as BENCH_SCHEMA
from sglang_eagle3_ext.documents.serving_doc import SCHEMA as SERVING_SCHEMA
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.probes import window
from sglang_eagle3_ext.tune.sweep import SCHEMA as SWEEP_SCHEMA

REPO = Path(__file__).resolve().parents[1]
BY_NAME = {k.NAME: k for k in records.KINDS}


def _samples() -> list[tuple[str, dict]]:
    """Every committed JSON object that carries one of our four schema names, with its origin."""
    files = sorted({*REPO.glob("tests/data/**/*.json"), *REPO.glob("tests/data/**/*.jsonl"),
                    *REPO.glob("docs/data/h200-*/**/*.json"), *REPO.glob("docs/data/h200-*/**/*.jsonl")})
    out = []
    for f in files:
        text = f.read_text()
        if f.suffix == ".jsonl":
            objs = [(f"{f}:{i}", json.loads(ln)) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        else:
            objs = [(str(f), json.loads(text))]
        for origin, obj in objs:
            schema = obj.get("schema") if isinstance(obj, dict) else None
            if isinstance(schema, str) and schema.rpartition("/")[0] in BY_NAME:
                out.append((origin, obj))
    return out


SAMPLES = _samples()


def test_versions_match_the_writers():
    assert records.WindowRecord.accepted() == tuple(window.SCHEMAS)
    assert records.BenchResult.accepted() == (BENCH_SCHEMA,)
    assert records.Ladder.accepted() == (LADDER_SCHEMA,)
    assert records.SweepResults.accepted() == (SWEEP_SCHEMA,)
    assert records.ServingResult.accepted() == (SERVING_SCHEMA,)


def test_round_trip_every_committed_sample():
    counts: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    for origin, obj in SAMPLES:
        kind = BY_NAME[obj["schema"].rpartition("/")[0]]
        rec = records.from_json(obj, origin, kind)
        assert isinstance(rec, kind)
        assert records.to_json(rec) == obj, origin
        counts[kind.__name__] += 1
        versions[obj["schema"]] += 1
    # what is committed today (docs/data/h200-*, tests/data): enough of each kind to mean something
    assert counts["WindowRecord"] > 20 and counts["BenchResult"] > 20 and counts["SweepResults"] > 20
    assert counts["Ladder"] >= 10  # fewer ladders are committed (11 at the time of writing)
    assert counts["ServingResult"] >= 1  # tests/data/serving: an open-loop run against the stand-in
    assert versions["eagle3_prof/1"] > 20 and versions["eagle3_prof/2"] > 20


def test_typed_fields_read_the_values():
    origin, obj = next((o, x) for o, x in SAMPLES if x["schema"] == "eagle3_prof/2")
    rec = records.WindowRecord.from_json(obj, origin)
    assert rec.version == 2 and rec.cycles == obj["cycles"] and rec.steady == obj["steady"]
    assert rec.phases is obj["phases"]


GOOD_PROF = {"schema": "eagle3_prof/2", "cycles": 10, "mode": "events",
             "phases": {"cycle": {"mean_ms": 1.0}}}
GOOD_BENCH = {"schema": "eagle3_bench/1", "summary": {}, "label": "x"}
GOOD_LADDER = {"schema": "eagle3_ladder/1", "levels": []}
GOOD_SWEEP = {"schema": "eagle3_sweep/1", "configs": []}


@pytest.mark.parametrize("kind,obj,message", [
    (records.WindowRecord, {**GOOD_PROF, "schema": "eagle3_bench/1"},
     "f.jsonl:3: schema is 'eagle3_bench/1', expected one of eagle3_prof/1, eagle3_prof/2, eagle3_prof/3"),
    (records.WindowRecord, {**GOOD_PROF, "schema": "eagle3_prof/4"},
     "f.jsonl:3: schema 'eagle3_prof/4' is a version this tool does not read "
     "(it reads eagle3_prof/1, eagle3_prof/2, eagle3_prof/3)"),
    (records.WindowRecord, {k: v for k, v in GOOD_PROF.items() if k != "mode"}, "f.jsonl:3: record lacks 'mode'"),
    (records.WindowRecord, {**GOOD_PROF, "cycles": "12"}, "f.jsonl:3: cycles must be a number, got '12'"),
    (records.WindowRecord, {**GOOD_PROF, "steady": [1]}, "f.jsonl:3: steady must be an object, got [1]"),
    (records.WindowRecord, {**GOOD_PROF, "schema": "eagle3_prof/3", "by_key": []},
     "f.jsonl:3: by_key must be an object, got []"),
    (records.WindowRecord, [GOOD_PROF], "f.jsonl:3: a window record must be a JSON object, got list"),
    (records.BenchResult, {"summary": {}}, "f.jsonl:3: schema is None, expected one of eagle3_bench/1"),
    (records.BenchResult, {**GOOD_BENCH, "schema": "eagle3_bench/x"},
     "f.jsonl:3: schema 'eagle3_bench/x' is a version this tool does not read (it reads eagle3_bench/1)"),
    (records.BenchResult, {"schema": "eagle3_bench/1"}, "f.jsonl:3: record lacks 'summary'"),
    (records.BenchResult, {**GOOD_BENCH, "summary": None}, "f.jsonl:3: summary must be an object, got None"),
    (records.BenchResult, {**GOOD_BENCH, "label": 3}, "f.jsonl:3: label must be text, got 3"),
    (records.Ladder, {**GOOD_LADDER, "schema": "eagle3_sweep/1"},
     "f.jsonl:3: schema is 'eagle3_sweep/1', expected one of eagle3_ladder/1"),
    (records.Ladder, {**GOOD_LADDER, "schema": "eagle3_ladder/2"},
     "f.jsonl:3: schema 'eagle3_ladder/2' is a version this tool does not read (it reads eagle3_ladder/1)"),
    (records.Ladder, {"schema": "eagle3_ladder/1"}, "f.jsonl:3: record lacks 'levels'"),
    (records.Ladder, {**GOOD_LADDER, "levels": {}}, "f.jsonl:3: levels must be a list, got {}"),
    (records.SweepResults, {**GOOD_SWEEP, "schema": "sgl-eagle3"},
     "f.jsonl:3: schema is 'sgl-eagle3', expected one of eagle3_sweep/1"),
    (records.SweepResults, {**GOOD_SWEEP, "schema": "eagle3_sweep/0"},
     "f.jsonl:3: schema 'eagle3_sweep/0' is a version this tool does not read (it reads eagle3_sweep/1)"),
    (records.SweepResults, {"schema": "eagle3_sweep/1"}, "f.jsonl:3: record lacks 'configs'"),
    (records.SweepResults, {**GOOD_SWEEP, "name": ["a"]}, "f.jsonl:3: name must be text, got ['a']"),
])
def test_each_check_fails_with_one_line(kind, obj, message):
    with pytest.raises(UserError) as ei:
        kind.from_json(obj, "f.jsonl:3")
    assert str(ei.value) == message and ei.value.exit_code == 2


@pytest.mark.parametrize("kind,obj", [(records.WindowRecord, GOOD_PROF), (records.BenchResult, GOOD_BENCH),
                                      (records.Ladder, GOOD_LADDER), (records.SweepResults, GOOD_SWEEP)])
def test_minimal_and_unknown_fields_round_trip(kind, obj):
    x = {**obj, "future_field": {"a": [1, None]}, "route": None}
    rec = kind.from_json(x, "m")
    assert rec.to_json() == x and rec.extra["future_field"] == {"a": [1, None]}


def test_long_values_are_cut_to_one_short_line():
    with pytest.raises(UserError) as ei:
        records.BenchResult.from_json({**GOOD_BENCH, "runs": "x" * 500}, "b.json")
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 120 and msg.startswith("b.json: runs must be a list, got 'xxx")


def test_readers_route_through_records(tmp_path):
    """The existing readers now give the records' line for a field of the wrong JSON type."""
    from sglang_eagle3_ext.documents import prof_records
    from sglang_eagle3_ext.measure import compare
    from sglang_eagle3_ext.tune import sweep

    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({**GOOD_PROF, "time": 5}) + "\n")
    with pytest.raises(UserError, match=r"p\.jsonl:1: time must be text, got 5$"):
        prof_records.load(f)
    b = tmp_path / "b.json"
    b.write_text(json.dumps({**GOOD_BENCH, "runs": {}}))
    with pytest.raises(UserError, match=r"b\.json: runs must be a list, got \{\}$"):
        compare.load([str(b)])
    r = tmp_path / "results.json"
    r.write_text(json.dumps({"schema": SWEEP_SCHEMA, "configs": "none"}))
    with pytest.raises(UserError, match=r"results\.json: configs must be a list, got 'none'$"):
        sweep.load_results(r)
    lad = tmp_path / "l.json"
    lad.write_text(json.dumps({"schema": LADDER_SCHEMA}))
    with pytest.raises(UserError, match=r"l\.json: record lacks 'levels'$"):
        compare.load_ladders([str(lad)])


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            names |= {mod, *(f"{mod}.{a.name}" if mod else a.name for a in node.names)}
    return names


def test_sglang_side_does_not_import_records():
    pkg = REPO / "sglang_eagle3_ext"
    files = sorted((pkg / "runtime").rglob("*.py"))
    assert len(files) > 2
    assert "documents.records" in _imports(pkg / "measure" / "compare.py")  # the scan does see one
    for f in files:
        bad = {n for n in _imports(f) if "records" in n.split(".")}
        assert not bad, f"{f} imports {bad}"
