"""Hostile files (issue 23, cases 12-15 and 20): YAML bombs and depth, probe records that cannot be
true, a file still being written, stray rank siblings, deep JSON everywhere we read JSON, labels with
markup or escape codes, an ``architectures`` string. In process through ``cli.main`` (the real
command code and its last-resort handler), so each case is fast; "a bug in sgl-eagle3" or a
traceback in the output fails the test.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import accounting
from sglang_eagle3_ext.runtime.errors import UserError

REPO = Path(__file__).resolve().parent.parent
STEADY = REPO / "tests/data/profile/steady_issue15.jsonl"
BENCH = REPO / "docs/data/h200-2026-11-29/run4/e2e/off/configs/eagle3-s2-k1-d3-no-nccl/bench.json"
LAYERS = REPO / "tests/data/layers"
BUG = "a bug in sgl-eagle3"
_RECS = [json.loads(x) for x in STEADY.read_text().splitlines() if x.strip()]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in args])
    c = capsys.readouterr()
    assert BUG not in c.out + c.err and "Traceback" not in c.err, c.err
    if rc:
        lines = [x for x in c.err.splitlines() if x.strip() and not x.startswith(("note:", "warning:"))]
        assert len(lines) == 1 and lines[0].startswith("error:"), c.err
    return rc, c.out, c.err


def _jsonl(tmp_path: Path, recs: list, name: str = "p.jsonl", tail: str = "\n") -> Path:
    f = tmp_path / name
    f.write_text("\n".join(json.dumps(r) for r in recs) + tail)
    return f


# ---------------------------------------------------------------- case 12: YAML


def _bomb(levels: int = 9) -> str:
    out = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        out.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("text,words", [
    (_bomb(), "through its aliases"),
    ("model: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64"),
    ("model:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 300)) + "\n", "nested deeper than 64"),
    ("a: &a [*a]\n", "recursive alias"),
])
def test_case12_yaml_bombs_and_depth_are_one_line(tmp_path, capsys, text, words):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    t0 = time.monotonic()
    for args in (["launch", f, "--dry-run", "--no-sglang-check"], ["sweep", f, "--plan", "--out", tmp_path / "o"]):
        rc, _, err = run_cli(capsys, *args)
        assert rc == 2 and words in err
    assert time.monotonic() - t0 < 60  # a hang guard: an expanded bomb would never finish


def test_case12_nccl_presets_use_the_same_loader(tmp_path):
    from sglang_eagle3_ext.runtime import nccl

    f = tmp_path / "nccl.yaml"
    f.write_text("presets:\n" + _bomb())
    with pytest.raises(UserError, match="through its aliases"):
        nccl._read_yaml(f)


def test_case12_small_aliases_still_load(tmp_path, capsys):
    from sglang_eagle3_ext.runtime.safeparse import yaml_load

    assert yaml_load("a: &x [1, 2]\nb: *x\n", "f") == {"a": [1, 2], "b": [1, 2]}


# ---------------------------------------------------------------- case 13: values that cannot be true


@pytest.mark.parametrize("path,value,words", [
    (("cycles",), float("nan"), "cycles must be a number"),
    (("cycles",), -5, "cycles must be a count"),
    (("requests",), float("inf"), "requests must be a number"),
    (("tokens",), -1, "tokens must be a count"),
    (("accept_len",), -0.62, "accept_len must be a finite number >= 0"),
    (("eff_tok_s",), float("nan"), "eff_tok_s must be a number"),
    (("phases", "cycle", "mean_ms"), float("nan"), "phases.cycle.mean_ms"),
    (("phases", "draft", "p50_ms"), -3.0, "phases.draft.p50_ms must be a finite number >= 0"),
    (("steady", "accept_len"), float("inf"), "steady.accept_len"),
    (("steady", "cycles"), -2, "steady.cycles must be a count"),
    (("by_batch", "1", "tokens"), -7, "by_batch.1.tokens must be a count"),
    (("boundary", "extra_ms"), float("nan"), "boundary.extra_ms must be a number"),
    (("per_position", 0), 13.3, "per_position[0] must be a rate"),
])
def test_case13_nan_infinity_negative_refused_naming_line_and_field(tmp_path, capsys, path, value, words):
    recs = copy.deepcopy(_RECS)
    node = recs[1]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    f = _jsonl(tmp_path, recs)
    rc, _, err = run_cli(capsys, "profile", f)
    assert rc == 2 and f"{f}:2:" in err and words in err


def test_case13_two_ranks_in_one_file_are_refused(tmp_path, capsys):
    recs = copy.deepcopy(_RECS)
    for r in recs[len(recs) // 2:]:
        r["rank"] = 1
    f = _jsonl(tmp_path, recs)
    rc, _, err = run_cli(capsys, "profile", f)
    assert rc == 2 and "rank 1 record after rank 0 records" in err and f"{f}:{len(recs) // 2 + 1}:" in err


@pytest.mark.parametrize("field,value", [("decode_tok_s", float("nan")), ("decode_tok_s", -120.0),
                                         ("e2e_tok_s", float("inf"))])
def test_case13_compare_refuses_nan_and_negative_tok_s(tmp_path, capsys, field, value):
    doc = json.loads(BENCH.read_text())
    doc["summary"][field]["avg"] = value
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    rc, _, err = run_cli(capsys, "compare", f, BENCH)
    assert rc == 2 and f"summary.{field}.avg must be" in err and ("finite" in err or "number" in err), err


def test_case13_compare_refuses_a_negative_accept_length(tmp_path, capsys):
    doc = json.loads(BENCH.read_text())
    doc["summary"]["accept_length"] = -0.62
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    rc, _, err = run_cli(capsys, "compare", f, BENCH)
    assert rc == 2 and "accept_length" in err


# ---------------------------------------------------------------- case 14: wrong types, deep JSON


@pytest.mark.parametrize("path,value,words", [
    (("accept_hist",), {"one": 3}, "accept_hist keys are accepted lengths"),
    (("accept_hist",), {"1": "three"}, "accept_hist must map lengths to counts"),
    (("accept_hist",), {"1": -4}, "accept_hist.1 must be a count"),
    (("cycles",), "400", "cycles must be a number"),
    (("cycles",), 10**300, "cycles must be a count"),
    (("tokens",), 2.5, "tokens must be a count"),
    (("by_batch",), {"one": {"cycles": 1}}, "by_batch keys are batch sizes"),
    (("by_batch",), {"1": "x"}, "by_batch.1 must be an object"),
    (("spec", "steps"), "five", "spec.steps must be a count"),
    (("spec", "steps"), 10**15, "spec.steps must be at most 1024"),
    (("spec",), "x", "spec must be an object"),
    (("steady", "phases"), [1], "steady.phases must be an object"),
    (("boundary", "reasons"), {"join": "x"}, "boundary.reasons.join must be a count"),
    (("window",), True, "window must be a number"),
])
def test_case14_wrong_types_and_huge_ints_refused(tmp_path, capsys, path, value, words):
    recs = copy.deepcopy(_RECS)
    node = recs[2]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    f = _jsonl(tmp_path, recs)
    rc, _, err = run_cli(capsys, "profile", f, "--predict")
    assert rc in (1, 2) and f"{f}:3:" in err and words in err


def test_case14_log_block_with_a_huge_number(tmp_path, capsys):
    from sglang_eagle3_ext.runtime.probes.window import format_block

    block = format_block(_RECS[1]).splitlines()
    head = block[0].split(" (", 1)
    block[0] = f"{head[0]} ({'9' * 5000} cycles," + head[1].split(" cycles,", 1)[1]
    f = tmp_path / "server.log"
    f.write_text("\n".join(block) + "\n")
    rc, _, err = run_cli(capsys, "profile", f)
    assert rc != 0 and "server.log:1" in err


DEEP = "[" * 100_000 + "]" * 100_000


def test_case14_deep_json_in_profile_compare_prompts_layers(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    deep_line = tmp_path / "deep.jsonl"
    deep_line.write_text('{"schema": "eagle3_prof/2", "x": ' + DEEP + "}\n")
    cfg_dir = tmp_path / "model"
    cfg_dir.mkdir()
    (cfg_dir / "config.json").write_text(DEEP)
    draft_nested = tmp_path / "draft"
    draft_nested.mkdir()
    (draft_nested / "config.json").write_text('{"eagle_config": ' + "[" * 70 + "]" * 70 + "}")
    cases = [
        ["profile", deep_line],
        ["profile", STEADY, "--bench", deep],
        ["compare", deep, BENCH],
        ["bench", "--url", "http://127.0.0.1:9", "--prompts", deep],
        ["layers", "check", "--target", cfg_dir, "--draft", LAYERS / "draft_2_30_58"],
        ["layers", "check", "--target", LAYERS / "llama31_8b_target", "--draft", draft_nested],
    ]
    for args in cases:
        rc, _, err = run_cli(capsys, *args)
        assert rc in (1, 2) and ("deeper than 64" in err or "not a bench result" in err), (args, err)


@pytest.mark.parametrize("draft_patch,words", [
    ({"eagle_config": "eagle_aux_hidden_state_layer_ids: [2, 30, 58]"}, "eagle_config must be an object"),
    ({"architectures": "LlamaForCausalLMEagle3"}, "'architectures' is the string"),
    ({"num_aux_hidden_states": "three"}, "num_aux_hidden_states must be a whole number"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": 5}}, "must be a list of integers"),
    ({"eagle_aux_hidden_state_layer_ids": "2,30"}, "must be a list of integers"),
])
def test_case14_eagle_config_and_architectures_strings(tmp_path, capsys, draft_patch, words):
    cfg = json.loads((LAYERS / "draft_2_30_58" / "config.json").read_text())
    cfg.update(draft_patch)
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run_cli(capsys, "layers", "check", "--target", LAYERS / "llama31_8b_target", "--draft", d)
    assert rc == 2 and words in err


def test_case20_target_architectures_string_is_not_arch_L(tmp_path, capsys):
    cfg = json.loads((LAYERS / "llama31_8b_target" / "config.json").read_text())
    cfg["architectures"] = "LlamaForCausalLM"
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run_cli(capsys, "layers", "check", "--target", d, "--draft", LAYERS / "draft_2_30_58")
    assert rc == 2 and "'architectures' is the string 'LlamaForCausalLM'" in err and "'L' is not" not in err


# ---------------------------------------------------------------- case 15: live files, rank siblings


def test_case15_partial_last_line_is_skipped_with_a_note(tmp_path, capsys):
    whole = "\n".join(json.dumps(r) for r in _RECS) + "\n"
    f = tmp_path / "live.jsonl"
    f.write_text(whole + json.dumps(_RECS[0])[:57])  # the writer is mid-line
    rc, out, err = run_cli(capsys, "profile", f, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert any("last line is incomplete" in n for n in doc["files"][0]["notes"])
    assert doc["files"][0]["cycles"] == accounting.summarize(prof_records.load(STEADY))["cycles"]
    # the same bad line with a newline after it is damage, not a live write
    f.write_text(whole + json.dumps(_RECS[0])[:57] + "\n" + whole)
    rc, _, err = run_cli(capsys, "profile", f)
    assert rc == 2 and f"{f}:{len(_RECS) + 1}: not valid JSON" in err


def test_case15_only_a_partial_line_is_one_line(tmp_path, capsys):
    f = tmp_path / "live.jsonl"
    f.write_text(json.dumps(_RECS[0])[:40])
    rc, _, err = run_cli(capsys, "profile", f)
    assert rc == 1 and "no complete eagle3_prof record yet" in err


@pytest.mark.parametrize("sibling", ["garbage", "empty", "dir", "fifo", "unreadable"])
def test_case15_stray_rank_sibling_is_a_note_and_the_main_file_reads(tmp_path, capsys, sibling):
    main = _jsonl(tmp_path, _RECS, "probes.jsonl")
    s = tmp_path / "probes.jsonl.rank1"
    if sibling == "garbage":
        s.write_bytes(b"\x00\xffnot a record\n")
    elif sibling == "empty":
        s.write_text("")
    elif sibling == "dir":
        s.mkdir()
    elif sibling == "fifo":  # a read would block for ever
        os.mkfifo(s)
    else:
        s.write_text(json.dumps(_RECS[0]) + "\n")
        s.chmod(0)
        if os.access(s, os.R_OK):
            pytest.skip("running as root: a mode-0 file is still readable")
    rc, out, err = run_cli(capsys, "profile", main, "--json")
    assert rc == 0
    notes = json.loads(out)["files"][0]["notes"]
    assert any("rank sibling skipped" in n and "probes.jsonl.rank1" in n for n in notes)
    # named on the command line, the same file is an error
    if sibling not in ("dir", "fifo"):
        rc, _, err = run_cli(capsys, "profile", s)
        assert rc != 0


# ---------------------------------------------------------------- case 20: labels with markup / escapes


def test_case20_compare_prints_markup_and_escape_codes_verbatim(tmp_path, capsys):
    doc = json.loads(BENCH.read_text())
    doc["label"] = "[/]\x1b[2J[bold red]evil|x"
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    for extra in ([], ["--markdown"]):
        rc, out, _ = run_cli(capsys, "compare", f, BENCH, *extra)
        assert rc == 0 and "\x1b" not in out and "[/]\\x1b[2J[bold" in out  # (the table may wrap)
    assert "[/]\\x1b[2J[bold red]evil\\|x" in out  # a pipe in a label does not split the markdown row


def test_case20_profile_prints_file_text_verbatim(tmp_path, capsys):
    recs = copy.deepcopy(_RECS)
    for r in recs:
        r["sglang_version"] = "[/]\x1b]0;pwned\x07"
    f = _jsonl(tmp_path, recs)
    rc, out, _ = run_cli(capsys, "profile", f)
    assert rc == 0 and "\x1b" not in out and "\x07" not in out and "[/]\\x1b]0;pwned\\x07" in out


def test_case14_sweep_tiers_skip_records_with_bad_values(tmp_path):
    """The sweep's tier analysis reads probe files too: a record with a word for a batch size or a
    NaN per-stream figure is skipped there (``profile`` names it), never a crash in the fits."""
    from sglang_eagle3_ext.tune import tiers

    good = copy.deepcopy(_RECS[1])
    bad_key = dict(copy.deepcopy(good), by_batch={"one": {"cycles": 1}})
    bad_val = copy.deepcopy(good)
    next(iter(bad_val["by_batch"].values()))["tokens"] = float("nan")
    f = _jsonl(tmp_path, [good, bad_key, bad_val])
    recs = tiers.read_records(f)
    assert len(recs) == 1
    assert tiers.by_batch(recs) == accounting.by_batch_summary([good])


def test_case15_a_named_pipe_still_reads(tmp_path, capsys):
    """Only unnamed siblings must be regular files: `profile <(grep ... server.log)` reads a pipe."""
    import threading

    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    data = "\n".join(json.dumps(r) for r in _RECS) + "\n"

    def feed() -> None:
        with open(fifo, "w") as w:
            w.write(data)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    rc, out, _ = run_cli(capsys, "profile", fifo, "--json")
    t.join(5)
    assert rc == 0 and json.loads(out)["files"][0]["windows"] >= 1
