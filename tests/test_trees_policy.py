"""The throughput policy over chains and trees (runtime/policy_trees.py): costs per (state, padded
batch size), acceptance per tree counted online (never from chain cycles), bounded exploration,
eligibility per level, rank agreement; a chain-only scan keeps the chain decider exactly.

What is faked and why: no GPU and no SGLang server, so the decider is fed synthetic decode cycles
(batch sizes and per-request accept counts, as the step-control hooks pass them) over a
recorded-like table: the chain costs of the committed H200 8B scan table
(tests/data/policy/scan-h200-8b-p08.json) plus tree cells shaped like the H200 tree round
(tree 5x4x21 about +17 % over chain 5 at 1 stream, behind it at 32).
"""

from __future__ import annotations

import copy
import json
import random

import pytest
from conftest import REPO

from sglang_eagle3_ext.runtime import policy, stepctl

H200 = REPO / "tests" / "data" / "policy" / "scan-h200-8b-p08.json"
TREE = "5x4x21"


def _chain_doc() -> dict:
    return json.loads(H200.read_text())


def _with_tree(tree_al: float = 5.4) -> dict:
    """The chain table plus tree cells: per batch size, the tree's cycle costs x1.12 / x1.3 / x2.0
    chain 5's at 1 / 8 / 32, at a higher accept length (its prior)."""
    doc = _chain_doc()
    five = {c["bs"]: c for c in doc["cells"] if c["steps"] == 5 and policy.is_main(c)}
    for bs, f in ((1, 1.12), (8, 1.3), (32, 2.0)):
        if bs in five:
            doc["cells"].append({"steps": 5, "topk": 4, "draft_tokens": 21, "state": TREE, "bs": bs, "level": bs,
                                 "cycles": 300, "cycle_ms": five[bs]["cycle_ms"] * f, "accept_len": tree_al,
                                 "per_position": [0.95, 0.85, 0.7, 0.5, 0.3]})
    return doc


def _info(built=(1, 2, 3, 4, 5, TREE), rng=(1, 16)) -> stepctl.ControllerInfo:
    return stepctl.ControllerInfo(built=tuple(built), cuda_graph_bs=tuple(policy.default_cuda_graph_bs(64)),
                                  tree_ranges={TREE: rng} if TREE in built else {})


def _decider(tmp_path, doc, info=None, **knobs):
    p = tmp_path / "scan.json"
    p.write_text(json.dumps(doc))
    return policy.make_decider(info or _info(), str(p), **knobs)


def _chain_accepts(rng: random.Random, steps: int, n: int) -> list[int]:
    rates = [0.8, 0.6, 0.45, 0.35, 0.25, 0.2, 0.15]
    out = []
    for _ in range(n):
        a = 0
        while a < steps and rng.random() < rates[a]:
            a += 1
        out.append(a)
    return out


def _run(dec, bs: int, cycles: int, tree_accept: float, built=(1, 2, 3, 4, 5, TREE), seed: int = 5):
    """Drive ``cycles`` decode cycles at batch size ``bs``; a tree cycle's requests accept
    ``tree_accept`` drafts on average (synthetic), chains by fixed per-position rates."""
    rng = random.Random(seed)
    chosen = []
    cur = 5
    for _ in range(cycles):
        cur = dec.choose(bs, cur, list(built))
        chosen.append(cur)
        if isinstance(cur, str):
            acc = [min(5, max(0, int(tree_accept + rng.choice((-1, 0, 0, 1))))) for _ in range(bs)]
        else:
            acc = _chain_accepts(rng, cur, bs)
        dec.observe(acc, bs, cur)
    return chosen


def test_a_tree_cell_never_enters_the_chain_table():
    t = policy.table_from_doc(_with_tree(), source="t")
    c = policy.table_from_doc(_chain_doc(), source="t")
    assert t.points == c.points and t.accept_len == c.accept_len and t.prior == c.prior
    assert sorted(t.trees.points) == [TREE] and c.trees is None
    assert t.trees.accept_len[TREE] == pytest.approx(5.4)


def test_chain_only_scan_keeps_the_chain_decider_exactly(tmp_path):
    dec = _decider(tmp_path, _chain_doc(), _info(built=(1, 2, 3, 4, 5)))
    assert type(dec) is policy.PolicyDecider
    ref = policy.PolicyDecider(policy.load_table(H200))
    ref.table.regraph(policy.default_cuda_graph_bs(64))
    assert _run(dec, 8, 400, 0, built=(1, 2, 3, 4, 5)) == _run(ref, 8, 400, 0, built=(1, 2, 3, 4, 5))


def test_tree_at_low_batch_chain_at_high_batch(tmp_path):
    dec = _decider(tmp_path, _with_tree())
    assert isinstance(dec, policy.TreeDecider)
    at1 = _run(dec, 1, 600, tree_accept=4.5)
    assert max(set(at1), key=at1.count) == TREE
    at32 = _run(dec, 32, 600, tree_accept=4.5)
    assert TREE not in at32  # not eligible at 32 (graphs for 1-16 only), never run there
    assert max(set(at32), key=at32.count) != TREE
    ctl = dec.window_control()
    assert ctl["tiers"]["1"] == TREE and ctl["tiers"]["32"] in (1, 2, 3, 4, 5)
    assert ctl["trees"][TREE]["requests"] > 0 and ctl["chosen"]["1"][TREE] > 300


def test_tree_acceptance_is_counted_from_its_own_cycles_only(tmp_path):
    dec = _decider(tmp_path, _with_tree())
    prior = dec.tree_accept_len(TREE)
    for _ in range(200):  # chain cycles only: nothing about the tree
        dec.observe([5] * 8, 8, 5)
    assert dec.tree_accept_len(TREE) == prior
    dec.observe([0] * 64, 1, TREE)  # the tree's own verify results
    assert dec.tree_accept_len(TREE) < prior


def test_a_tree_that_accepts_little_online_loses_its_tier(tmp_path):
    """The scan's prior says the tree wins at 1 stream; its own verify results say otherwise
    (this traffic accepts ~1 of its drafts): the tier moves to a chain."""
    dec = _decider(tmp_path, _with_tree())
    chosen = _run(dec, 1, 1500, tree_accept=0.6)
    assert chosen[0] == TREE  # the prior
    assert chosen[-256:].count(TREE) <= 256 // 32 + 1  # exploration only
    assert dec.tiers[1].steps != TREE


def test_exploration_is_bounded_reported_and_decays(tmp_path):
    dec = _decider(tmp_path, _with_tree(tree_al=1.5))  # the prior says the tree never pays
    chosen = _run(dec, 8, 1024, tree_accept=0.5)
    n = chosen.count(TREE)
    assert 0 < n <= 1024 // 32 + 1  # one cycle in 32 at most while it has few results
    share = dec.window_control()["tree_explore_share"]
    assert share == pytest.approx(n / 1024, abs=1e-4)
    more = _run(dec, 8, 4096, tree_accept=0.5, seed=9)  # past tree_explore_until: one in 256
    assert more.count(TREE) <= 4096 // 256 + 1
    assert dec.window_control()["tree_explore_share"] < 0.01


def test_rank_agreement(tmp_path):
    a, b = _decider(tmp_path, _with_tree()), _decider(tmp_path, _with_tree())
    rng = random.Random(11)
    cur_a = cur_b = 5
    for _ in range(1500):
        bs = rng.choice([1, 3, 8, 17, 32])
        cur_a, cur_b = a.choose(bs, cur_a, list(_info().built)), b.choose(bs, cur_b, list(_info().built))
        assert cur_a == cur_b
        acc = [rng.randint(0, 5) for _ in range(bs)]
        a.observe(acc, bs, cur_a)
        b.observe(list(acc), bs, cur_b)
    assert a.summary() == b.summary()


def test_a_held_tree_the_scan_never_measured_refuses_the_start(tmp_path):
    with pytest.raises(ValueError, match="no cell for tree"):
        _decider(tmp_path, _chain_doc(), _info())
    doc = _with_tree()
    bad = copy.deepcopy(doc)
    bad["cells"][-1].pop("accept_len")
    bad["cells"] = [c for c in bad["cells"] if c.get("state") != TREE or "accept_len" not in c]
    with pytest.raises(ValueError, match="no accept_len"):
        policy.table_from_doc(bad, source="t")


def test_never_raises_into_sglang(tmp_path, capsys):
    dec = _decider(tmp_path, _with_tree())
    assert dec.choose(1, 5, [5, TREE, None]) == 5  # a key it cannot order: hold what runs
    dec.observe(["x"], 1, TREE)
    assert "policy decider" in capsys.readouterr().err


def test_an_eligible_tree_that_costs_too_much_at_32_streams_is_only_explored(tmp_path):
    dec = _decider(tmp_path, _with_tree(), _info(rng=(1, 64)))
    at32 = _run(dec, 32, 640, tree_accept=4.5)
    assert 0 < at32.count(TREE) <= 640 // 32 + 1 and dec.tiers[32].steps != TREE


def test_launch_policy_over_a_scan_that_held_trees(tmp_path, monkeypatch, capsys):
    """`launch --policy SCAN --trees ...` (dry run on the pinned 0.5.23 tree): a tree the scan
    measured is held; one it did not is refused with one line; without --trees it says how."""
    from test_flags import write_model

    from sglang_eagle3_ext import cli
    from sglang_eagle3_ext.serve import releases

    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    t = write_model(tmp_path / "t", "LlamaForCausalLM")
    d = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(_with_tree()))
    base = ["launch", "--sglang-root", str(releases.fetch("0.5.23")), "--model", str(t), "--draft", str(d),
            "--policy", str(scan), "--no-sglang-check", "--dry-run"]
    assert cli.main([*base, "--trees", f"{TREE}@1-16"]) == 0
    cap = capsys.readouterr()
    assert f"export SGLANG_EAGLE3_TREES={TREE}@1-16" in cap.out
    assert f"and trees ['{TREE}'] per batch size" in cap.err
    assert cli.main([*base, "--trees", "3x4x8"]) == 2
    err = capsys.readouterr().err
    assert "error: --trees 3x4x8: the scan" in err and f"(it measured trees {TREE})" in err
    assert cli.main(base) == 0
    assert f"--trees {TREE} holds them too" in capsys.readouterr().err


def test_calibrate_keeps_the_trees_at_the_scans_cost():
    """`calibrate` moves the chains' costs by the served traffic's probes; a tree cell (no tree
    probe key here) stays at the scan's own cost, so the calibrated file still drives trees."""
    from sglang_eagle3_ext.tune import calibrate

    doc = _with_tree()
    five8 = next(c for c in doc["cells"] if c["steps"] == 5 and c["bs"] == 8 and not c.get("state"))
    by_key = {"s5.k1.d6.b8.g": {"steps": 5, "topk": 1, "bs": 8, "graph": True, "cycles": 100,
                                "phases": {"cycle": {"mean_ms": five8["cycle_ms"] + 0.5}}},
              "s5.k4.d21.b8.g": {"steps": 5, "topk": 4, "bs": 8, "graph": True, "cycles": 100,
                                 "phases": {"cycle": {"mean_ms": 99.0}}}}
    new, _ = calibrate.calibrate(doc, by_key, sources=["p.jsonl"])
    trees = [c for c in new["cells"] if c.get("state") == TREE]
    assert len(trees) == 3 and all(c["calibrated"] == "tree: the scan's own cost" for c in trees)
    assert [c["cycle_ms"] for c in trees] == [c["cycle_ms"] for c in doc["cells"] if c.get("state") == TREE]
    assert policy.table_from_doc(new, source="c").trees.points.keys() == {TREE}
    assert f"trees ['{TREE}'] keep the scan's own costs" in new["notes"][-1]


def test_profile_policy_rows_keep_a_tree_apart_from_its_chain():
    """`profile`'s policy table (measure/policy_report.rows): a tree the policy chose is its own
    row, realised from the tree's own probe keys, never from chain 5's (it raised on the label)."""
    from sglang_eagle3_ext.measure import policy_report

    summary = {"control": {"policy": {"cycles": {"1": {"5": 10, TREE: 30}}, "explore": {"1": {TREE: 2}},
                                      "expected_per_stream_tok_s": {"1": {"5": 330.0, TREE: 400.0}}}},
               "by_key": {"s5.k4.d21.b1.g": {"bs": 1, "steps": 5, "topk": 4, "draft_tokens": 21, "cycles": 30,
                                             "per_stream_tok_s": 380.0},
                          "s5.k1.d6.b1.g": {"bs": 1, "steps": 5, "topk": 1, "draft_tokens": 6, "cycles": 10,
                                            "per_stream_tok_s": 340.0}}}
    rows = {r["steps"]: r for r in policy_report.rows(summary)}
    assert rows[TREE]["realised_per_stream_tok_s"] == 380.0 and rows[TREE]["explore"] == 2
    assert rows[5]["realised_per_stream_tok_s"] == 340.0 and rows[5]["realised_vs_expected_pct"] == 3.0
