"""Chains and trees in one start, the CLI side: `launch --trees` / `scan --trees` refusals and dry
runs, scan cells keyed by state, the decided ranking, the adaptive config's kept runner-up.

What is faked and why: no GPU, so the scan's server is tests/standins/standin_scan.py (a real
subprocess started from the argv and env the scan builds; it runs the plugin's real hold decider
over chains and trees and tags tree cycles with topk and draft tokens as the probes do; its
cost model and acceptance are made up, see its docstring). The release rules are read from the
real pinned release trees (0.5.13, 0.5.16, 0.5.23). The ranking is tested on the committed H200
scan (docs/data/h200-2026-12-01-r4/scan-8b), whose order was never separated.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.serve import releases
from sglang_eagle3_ext.tune import scan, scan_memory, scan_rank

STANDINS = Path(__file__).parent / "standins"
POLICY_SCAN = REPO / "tests" / "data" / "policy" / "scan-h200-8b-p08.json"
R4 = REPO / "docs" / "data" / "h200-2026-12-01-r4" / "scan-8b" / "scan"


@pytest.fixture()
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    t = write_model(tmp_path / "t", "LlamaForCausalLM")
    d = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    return str(t), str(d)


@pytest.fixture()
def tree_scan(tmp_path):
    """The committed 8B chain table plus cells for the trees 5x4x21 and 3x4x8 (as scan --trees writes them)."""
    import json

    doc = json.loads(POLICY_SCAN.read_text())
    for c in [c for c in doc["cells"] if c["steps"] == 5]:
        for st, f, al in (("5x4x21", 1.2, 5.0), ("3x4x8", 1.05, 3.6)):
            doc["cells"].append({**c, "state": st, "steps": int(st[0]), "topk": 4, "draft_tokens": int(st.split("x")[2]),
                                 "cycle_ms": c["cycle_ms"] * f, "accept_len": al, "per_position": []})
    p = tmp_path / "scan-trees.json"
    p.write_text(json.dumps(doc))
    return str(p)


def _launch(models, version, *more):
    t, d = models
    return cli.main(["launch", "--sglang-root", str(releases.fetch(version)), "--model", t, "--draft", d,
                     "--no-sglang-check", "--dry-run", *more])


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_launch_trees_dry_run_writes_the_env_and_prints_the_envelope(version, models, tree_scan, capsys):
    rc = _launch(models, version, "--policy", tree_scan, "--trees", "5x4x21@1-16,3x4x8@1-4",
                 "--", "--cuda-graph-max-bs-decode" if version == "0.5.23" else "--cuda-graph-max-bs", "32")
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "export SGLANG_EAGLE3_TREES=5x4x21@1-16,3x4x8@1-4" in cap.out
    assert "--speculative-eagle-topk 1" in cap.out and "--speculative-adaptive" in cap.out
    assert "tree 5x4x21 (5 steps, topk 4, 21 draft tokens): chosen at padded batch sizes 1-16; CUDA graphs at " \
           "[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]" in cap.out
    assert "tree 3x4x8 (3 steps, topk 4, 8 draft tokens): chosen at padded batch sizes 1-4; CUDA graphs at " \
           "[1, 2, 3, 4]" in cap.out
    # 5x4x21: topk x steps = 20 draft slots, 21 verified tokens -> 21 KV slots per decode per request
    assert "max draft tokens 21, topk carried 4, KV slots per decode per request 21 (draft writes 20)" in cap.out
    assert "policy decides" in cap.err


@pytest.mark.parametrize("version,more,needle", [
    ("0.5.13", ["--policy", str(POLICY_SCAN)], "--trees: SGLang 0.5.13 lacks get_alloc_len_per_decode"),
    ("0.5.23", [], "--trees needs adaptive speculation"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--page-size", "16"], "--page-size 16: trees beside chains "
                                                                         "need page size 1"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--attention-backend", "trtllm_mha"],
     "--attention-backend trtllm_mha: a tree needs a backend with tree masks"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--decode-attention-backend", "flashmla"],
     "--decode-attention-backend flashmla"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--speculative-draft-attention-backend", "trtllm_mha"],
     "--speculative-draft-attention-backend trtllm_mha"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--speculative-use-rejection-sampling"],
     "--trees with --speculative-use-rejection-sampling"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--enable-dp-attention"], "with --enable-dp-attention"),  # adaptive refuses it first
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--pp-size", "2"], "--trees with --pp-size 2"),
    ("0.5.23", ["--policy", str(POLICY_SCAN), "--", "--cuda-graph-max-bs-decode", "8"],
     "tree 5x4x21@12-16: no captured CUDA-graph batch size is inside its range"),
])
def test_launch_trees_refusals_one_line(version, more, needle, models, tree_scan, capsys):
    trees = "5x4x21@12-16" if "8" in more[-1:] else "5x4x21@1-16"
    rc = _launch(models, version, "--trees", trees, *[tree_scan if m == str(POLICY_SCAN) else m for m in more])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert err.count("error:") == 1 and "Traceback" not in err


def test_launch_trees_with_adaptive_but_no_decider(models, tmp_path, capsys):
    cfg = tmp_path / "a.json"
    cfg.write_text('{"1": {"candidate_steps": [3, 5]}}')
    assert _launch(models, "0.5.23", "--adaptive", str(cfg), "--trees", "5x4x21") == 2
    assert "--trees needs a decider: SGLang's own rule picks chains only" in capsys.readouterr().err


@pytest.mark.parametrize("bad,needle", [("5x4x99", "draft tokens must be 2..64"),
                                        ("5x4x99@1-16", "draft tokens must be 2..64"),
                                        ("2x4x30", "2 steps of topk 4 draft at most 20"),
                                        ("5", "a tree has topk > 1"),
                                        ("5x4x21@8-2", "must be 1 <= N <= M"),
                                        ("5x4x21,5x4x21", "listed twice"),
                                        ("", "names no tree")])
def test_invalid_tree_one_line(bad, needle):
    from sglang_eagle3_ext.runtime.errors import UserError
    from sglang_eagle3_ext.serve.trees_launch import parse

    with pytest.raises(UserError) as e:
        parse(bad)
    assert needle in str(e.value) and str(e.value).startswith("--trees") and e.value.exit_code == 2


def test_launch_invalid_tree_is_refused_before_anything(models, tree_scan, capsys):
    assert _launch(models, "0.5.23", "--policy", tree_scan, "--trees", "") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --trees ''") and "names no tree" in err


def test_log_lines_surface_the_state_building_lines(tmp_path):
    from sglang_eagle3_ext.serve.trees_launch import log_lines

    log = tmp_path / "server.log"
    log.write_text("[2026 TP0] Built adaptive runtime state steps=3: elapsed=1.20s, mem=0.15GB\n"
                   "[2026 TP1] Built adaptive runtime state steps=3: elapsed=1.20s, mem=0.15GB\n"
                   "[2026 TP0] Built adaptive runtime state steps=5: elapsed=1.70s, mem=0.42GB\n"
                   "[2026 TP0] trees: built tree 5x4x21 (5 steps, topk 4, 21 draft tokens) with graphs for batch "
                   "sizes [1, 2, 4]\nunrelated\n")
    got = log_lines(log)
    assert len(got) == 3 and "TP1" not in "".join(got) and got[-1].endswith("[1, 2, 4]")


def test_graph_memory_of_a_tree_is_its_own_state(tmp_path):
    """SGLang's builder logs a tree as 'steps=5' like chain 5: the plugin's line right after it
    moves that state's memory to the tree's label."""
    log = tmp_path / "server.log"
    log.write_text("AdaptiveSpeculativeParams initialized: steps=5, candidate_steps=[3, 5]\n"
                   "Capture target verify CUDA graph end. elapsed=3.13 s, mem usage=0.30 GB, avail mem=62.29 GB.\n"
                   "Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.01 GB, avail mem=62.27 GB.\n"
                   "Built adaptive runtime state steps=3: elapsed=1.20s, mem=0.15GB\n"
                   "Built adaptive runtime state steps=5: elapsed=1.70s, mem=0.42GB\n"
                   "trees: built tree 5x4x21 (5 steps, topk 4, 21 draft tokens) with graphs for batch sizes [1]\n")
    m = scan_memory.log_graph_memory(log)
    assert m["per_state_gib"] == {"5": 0.31, "3": 0.15, "5x4x21": 0.42}
    assert m["total_gib"] == pytest.approx(0.88)


# ------------------------------------------------------------------ cells keyed by state


def _cell(steps, bs, rate, iv, topk=1, tokens=None, cycles=300):
    return {"steps": steps, "topk": topk, "draft_tokens": tokens or steps + 1, "bs": bs, "level": bs,
            "cycles": cycles, "blocks": 10, "per_stream_tok_s": rate, "throughput_tok_s": rate * bs,
            "cycle_ms": 10.0, "accept_len": 2.0, "per_position": [], "graph": True,
            "interval": {"per_stream_tok_s": iv}}


def _doc(cells):
    return {"schema": scan_doc.SCHEMA, "cells": cells, "candidates": [4, 5], "levels": sorted({c["bs"] for c in cells})}


def test_a_tree_never_merges_with_the_chain_of_its_steps():
    doc = _doc([_cell(5, 1, 340.0, [330.0, 350.0]), _cell(5, 1, 400.0, [390.0, 410.0], topk=4, tokens=21),
                _cell(5, 32, 300.0, [295.0, 305.0]), _cell(5, 32, 250.0, [245.0, 255.0], topk=4, tokens=21)])
    assert scan_doc.table(doc) == {1: {5: 340.0}, 32: {5: 300.0}}  # SGLang's tiers: chains only
    assert scan_doc.state_table(doc) == {1: {5: 340.0, "5x4x21": 400.0}, 32: {5: 300.0, "5x4x21": 250.0}}
    best = scan_doc.best_static(doc)
    assert (best["1"]["state"], best["32"]["state"]) == ("5x4x21", "5")
    assert scan_rank.verdict_lines(scan_doc.main_cells(doc)) == [
        "tree 5x4x21 +18 % over chain 5 at batch 1 (400.0 vs 340.0 tok/s per stream)",
        "chain 5 +20 % over tree 5x4x21 at batch 32 (300.0 vs 250.0 tok/s per stream)"]
    assert "5x4x21 |" in scan_doc.markdown(doc)


def test_ranking_says_plainly_what_is_not_decided():
    """The H100 case: at ~300 steady cycles a key the intervals were +-9-23 % wide."""
    cells = [_cell(5, 1, 340.0, [301.9, 378.2]), _cell(4, 1, 307.3, [262.5, 352.2]),
             _cell(5, 8, 340.0, [335.0, 345.0]), _cell(4, 8, 307.3, [302.0, 312.0]),
             _cell(5, 32, 300.0, [297.0, 303.0]), _cell(4, 32, 299.0, [296.0, 302.0])]
    r = scan_rank.ranking(cells, precision_pct=2.0)
    assert r["1"]["line"] == "not decided: 5 (340.0 [301.9, 378.2]) vs 4 (307.3 [262.5, 352.2])"
    assert not r["1"]["decided"] and not r["1"]["tie"] and not scan_rank.settled(r["1"])
    assert r["8"]["line"] == "decided: 5 (340.0 [335.0, 345.0]) over 4 (307.3 [302.0, 312.0])"
    assert r["32"]["tie"] and scan_rank.settled(r["32"]) and "a tie at the precision" in r["32"]["line"]
    assert scan_rank.undecided_runner_ups(r) == {1: 4, 32: 4}
    no_iv = scan_rank.rank_tier([_cell(5, 1, 340.0, None), _cell(4, 1, 300.0, None)])
    assert not no_iv["decided"] and "fewer than 2 hold blocks" in no_iv["line"]


def test_committed_h200_scan_is_not_decided_and_the_config_keeps_the_runner_up(tmp_path):
    """docs/data/h200-2026-12-01-r4/scan-8b: 5 over 4 at every level, never separated. Its
    adaptive config then listed 5 alone at batch 1 and 8; written again from the same cells it
    keeps 4 beside 5 there and says why."""
    doc = scan_doc.load(R4)
    assert doc["adaptive"]["tiers"] == {"1": [5], "8": [5], "32": [4, 5]}  # what it wrote then
    d = copy.deepcopy(doc)
    d["ranking"] = scan_rank.ranking(scan_doc.main_cells(d))
    assert [r["decided"] for r in d["ranking"].values()] == [False, False, False]
    assert d["ranking"]["1"]["line"] == "not decided: 5 (573.9 [488.9, 645.3]) vs 4 (531.2 [469.4, 583.3])"
    from sglang_eagle3_ext.serve import adaptive_format

    loader = adaptive_format.release_loader(releases.fetch("0.5.16") / "sglang")
    ad = scan.write_adaptive(d, tmp_path / "adaptive.json", loader, 5.0)
    assert ad["tiers"] == {"1": [4, 5], "8": [4, 5], "32": [4, 5]}
    assert ad["kept_undecided"] == {"1": 4, "8": 4, "32": 4}
    assert "4 stays beside it: the scan did not decide the order of the best and 4" in ad["reasons"]["1"]
    # without the ranking (an older scan.json): as before
    d.pop("ranking")
    assert scan.write_adaptive(d, tmp_path / "b.json", loader, 5.0)["tiers"] == doc["adaptive"]["tiers"]


# ------------------------------------------------------------------ one scan start, chains and trees


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scan_trees_one_start(models, tmp_path, capsys, monkeypatch):
    from sglang_eagle3_ext.commands import console

    monkeypatch.setenv("PYTHONPATH", f"{STANDINS}:{REPO}")
    monkeypatch.setattr(console.out, "width", 250)
    t, d = models
    out = tmp_path / "scan"
    rc = cli.main(["scan", "--sglang-root", str(releases.fetch("0.5.16")), "--model", t, "--draft", d,
                   "--steps", "1-3", "--trees", "3x4x8@1-4", "--concurrency", "1,16", "--max-tokens", "40",
                   "--block", "8", "--min-cycles", "24", "--profile-every", "40", "--time-limit", "15",
                   "--precision", "5", "--port", str(_free_port()), "--timeout", "30", "--python", sys.executable,
                   "--server-module", "standin_scan", "--no-sglang-check", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    log = (out / "server.log").read_text()
    assert "trees: built tree 3x4x8" in log and "--speculative-eagle-topk 1" in log
    doc = scan_doc.load(out)
    assert doc["trees"] == ["3x4x8"]
    at1 = {scan_doc.state_label(c): c for c in scan_doc.main_cells(doc) if c["bs"] == 1}
    at16 = {scan_doc.state_label(c) for c in scan_doc.main_cells(doc) if c["bs"] == 16}
    assert set(at1) == {"1", "2", "3", "3x4x8"} and at16 == {"1", "2", "3"}  # the tree only inside @1-4
    assert (at1["3x4x8"]["topk"], at1["3x4x8"]["draft_tokens"], at1["3"]["topk"]) == (4, 8, 1)
    assert at1["3x4x8"]["accept_len"] > at1["3"]["accept_len"] + 0.4  # its own cycles, not chain 3's
    assert doc["best"]["1"]["state"] == "3x4x8" and doc["best"]["16"]["state"] == "1"
    assert doc["ranking"]["1"]["best"] == "3x4x8"
    assert any(v.startswith("tree 3x4x8 +") and v.endswith("tok/s per stream)") and "over chain 2 at batch 1" in v
               for v in doc["verdict"])
    assert doc["memory"]["measured"]["per_state_gib"]["3x4x8"] == 0.16
    assert "Chain or tree, per batch size" in cap.out and "tree 3x4x8" in cap.out
    assert f"batch 1: tree 3x4x8 at {doc['best']['1']['per_stream_tok_s']:.1f} tok/s; " in cap.out
    assert "trees: built tree 3x4x8" in cap.err  # surfaced from the server log after the start
    assert "SGLang's adaptive config holds chains only" in doc["adaptive"]["reasons"]["1"]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.13"])
def test_scan_trees_dry_run_holds_chains_then_trees_or_refuses(version, models, tmp_path, capsys):
    t, d = models
    out = tmp_path / "o"
    rc = cli.main(["scan", "--sglang-root", str(releases.fetch(version)), "--model", t, "--draft", d, "--steps", "3-5",
                   "--trees", "5x4x21@1-16", "--concurrency", "1,8", "--out", str(out), "--dry-run",
                   "--no-sglang-check", "--", "--cuda-graph-max-bs-decode", "32"])
    cap = capsys.readouterr()
    assert not out.exists()  # a dry run or a refusal writes nothing
    if version == "0.5.13":
        assert rc == 2 and "error: --trees: SGLang 0.5.13 lacks get_alloc_len_per_decode" in cap.err
        return
    assert rc == 0, cap.err
    assert "export SGLANG_EAGLE3_HOLD_STEPS=5,4,3,5x4x21" in cap.out
    assert "export SGLANG_EAGLE3_TREES=5x4x21@1-16" in cap.out and "--speculative-num-steps 5" in cap.out
    assert "max draft tokens 21, topk carried 4, KV slots per decode per request 21" in cap.out


def test_launch_hold_over_chains_and_trees(models, tmp_path, capsys):
    """`launch --adaptive A --trees ... --hold N`: the held server of a token-identity check (every
    state in turn, a fixed schedule); refused with --policy, without --adaptive, below 1."""
    cfg = tmp_path / "a.json"
    cfg.write_text('{"1": {"candidate_steps": [3, 5]}}')
    base = ("--adaptive", str(cfg), "--trees", "3x2x7@1-16,5x4x21@1-16", "--", "--cuda-graph-max-bs-decode", "16")
    assert _launch(models, "0.5.16", "--hold", "4", *base) == 0
    cap = capsys.readouterr()
    assert "export SGLANG_EAGLE3_HOLD=4" in cap.out and "export SGLANG_EAGLE3_TREES=3x2x7@1-16,5x4x21@1-16" in cap.out
    assert "hold decides" in cap.err and "blocks of 2-6 decode cycles" in cap.err
    assert _launch(models, "0.5.16", "--hold", "0", *base) == 2
    assert "error: --hold 0: cycles per block must be >= 1" in capsys.readouterr().err
    assert _launch(models, "0.5.16", "--hold", "4", "--trees", "5x4x21") == 2
    assert "error: --hold needs --adaptive FILE" in capsys.readouterr().err


def test_compare_reads_a_tree_as_its_own_ladder():
    from sglang_eagle3_ext.measure import compare

    doc = _doc([_cell(5, 1, 340.0, [330.0, 350.0]), _cell(5, 1, 400.0, [390.0, 410.0], topk=4, tokens=21),
                _cell(5, 8, 300.0, [295.0, 305.0])])
    lads = {lad["label"]: [(lv["concurrency"], lv["summary"]["per_stream_tok_s"]) for lv in lad["levels"]]
            for lad in compare._scan_ladders(doc, "x")}
    assert lads == {"scan 5 steps (probes, steady)": [(1, 340.0), (8, 300.0)],
                    "scan tree 5x4x21 (probes, steady)": [(1, 400.0)]}


def test_a_switch_between_chain_and_tree_of_equal_steps_is_a_boundary_cycle():
    """The probes mark the first cycle after a state change as a switch (left out of the steady
    figures). Chain 5 -> tree 5x4x21 keeps the steps: it must still be one (it was not)."""
    from sglang_eagle3_ext.runtime.probes import window

    def tag(steps, topk, dt):
        return (steps, topk, dt, 1, True, 0, 1, 0, [0], True)

    tags = [tag(5, 1, 6), tag(5, 1, 6), tag(5, 4, 21), tag(5, 4, 21), tag(5, 1, 6)]
    assert window.switch_bits(tags, (5, 1, 6)) == [0, 0, window.SWITCH, 0, window.SWITCH]
    assert window.switch_bits(tags[2:], (5, 1, 6))[0] == window.SWITCH  # across windows: the state carried
    assert window.switch_bits(tags, 5) == [0, 0, window.SWITCH, 0, window.SWITCH]  # a caller passing steps only
    assert window.switch_bits([tag(3, 1, 4)], 5) == [window.SWITCH]


def test_control_choices_name_a_tree_by_its_label():
    from sglang_eagle3_ext.runtime.probes import window

    tags = [(5, 1, 6, 4, True, 0, 4, 0, [], True), (5, 4, 21, 4, True, 1, 4, 0, [], True),
            (5, 4, 21, 4, True, 1, 4, 0, [], True)]
    assert window.choices(tags) == {"4": {"5": 1, "5x4x21": 2}}
