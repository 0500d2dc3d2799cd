"""The throughput policy (issue 25): decider rules, rank agreement, refusals, `launch --policy`.

What is faked and why: no GPU and no SGLang server here, so the decider is fed synthetic decode
cycles (batch sizes and per-request accept counts, as the step-control hooks would pass them)
from the committed sample scans under tests/data/policy/ (scan-h200-8b-p08.json = the H200
round-3 probe records as a scan table, benchmarks/policy_sim.py make_scan_from_sweep). SGLang's
EMA rule of the simulator is checked against the real 0.5.16 source, executed from the pinned
tree. Launch tests are dry runs against the pinned release trees (``--sglang-root``).
"""

from __future__ import annotations

import ast
import copy
import json
import logging
import random
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import policy
from sglang_eagle3_ext.serve import releases

DATA = REPO / "tests" / "data" / "policy"
H200 = DATA / "scan-h200-8b-p08.json"
sys.path.insert(0, str(REPO / "benchmarks"))
import policy_sim  # noqa: E402


def _doc() -> dict:
    return json.loads(H200.read_text())


def _table(doc: dict | None = None) -> policy.ScanTable:
    return policy.table_from_doc(doc or _doc(), source="t")


def _cell(steps: int, bs: int, ms: float, rate: float = 0.8) -> dict:
    return {"steps": steps, "bs": bs, "cycle_ms": ms, "cycles": 100,
            "accept_len": policy.expected_tokens([rate] * steps, steps), "per_position": [rate] * steps}


def _scan(cells: list[dict]) -> dict:
    return {"schema": policy.SCHEMA, "cells": cells}


def _events(n: int, seed: int = 3) -> list[tuple[int, list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        bs = rng.choice([1, 3, 8, 17, 32, 40, 64])
        out.append((bs, [rng.randint(0, 5) for _ in range(bs)]))
    return out


def _drive(dec: policy.PolicyDecider, events, built=(0, 1, 2, 3, 4, 5)) -> list[int]:
    """The hooks' order: choose before the forward, observe the previous cycle's result (overlap)."""
    chosen, pending, current = [], None, max(built)
    for bs, correct in events:
        if pending:
            dec.observe(*pending)
        s = dec.choose(bs, current, list(built))
        chosen.append(s)
        current = s
        pending = ([min(c, s) for c in correct], bs, s)
    return chosen


# ------------------------------------------------------------------ the table


def test_table_from_the_h200_scan():
    t = _table()
    assert t.candidates == [0, 1, 2, 3, 4, 5]
    assert len(t.prior) == 5 and all(0.75 < p < 0.95 for p in t.prior)
    # measured points come back exactly (1, 8, 32 are CUDA-graph sizes under speculation)
    assert t.cycle_ms(5, 8) == pytest.approx(8.2004)
    # padding: a batch of 7 runs the graph of 7 (1..8 are all capture sizes); 9 runs the one of 10
    assert policy.pad_batch(7, t.graph_bs) == 7 and policy.pad_batch(9, t.graph_bs) == 10
    assert policy.pad_batch(33, t.graph_bs) == 40 and policy.pad_batch(999, t.graph_bs) == 999
    # between measured sizes: linear; beyond: extrapolated from the last two, never falling
    mid = t.cycle_ms(3, 20)
    assert t.cycle_ms(3, 8) < mid < t.cycle_ms(3, 32)
    assert t.cycle_ms(3, 64) > t.cycle_ms(3, 32)
    assert t.cycle_ms(3, 1) == t.cycle_ms(3, 1)
    assert t.cycle_ms(7, 8) is None


def test_capture_sizes_mirror_the_release_source():
    """default_cuda_graph_bs == the spec branch of 0.5.16 server_args.py, run from its source."""
    src = (releases.fetch("0.5.16") / "sglang" / "srt" / "server_args.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)
              and n.name == "_generate_decode_cuda_graph_batch_sizes")
    ns: dict = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "server_args.py", "exec"), ns)  # noqa: S102

    class _Args:
        disable_cuda_graph_padding = False
        speculative_algorithm = "EAGLE3"

    for max_bs in (8, 32, 160, 256, 512):
        assert policy.default_cuda_graph_bs(max_bs) == ns["_generate_decode_cuda_graph_batch_sizes"](_Args(), max_bs)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(schema="eagle3_sweep/1"), "not a scan result"),
    (lambda d: d.update(cells=[]), "no cells"),
    (lambda d: d["cells"][0].update(cycle_ms=-1), "not positive"),
    (lambda d: d["cells"][0].update(steps="3"), "not a step count"),
    (lambda d: d["cells"][0].update(bs=0), "not a batch size"),
    (lambda d: d["cells"][3].update(per_position=[0.5, 1.5]), "in [0, 1]"),
    (lambda d: d["cells"][3].update(accept_len=9.0), "outside [1, steps + 1]"),
    (lambda d: d.update(cells=[c for c in d["cells"] if c["steps"] == 0]), "only step 0"),
])
def test_bad_scan_files_one_line(mutate, needle):
    d = copy.deepcopy(_doc())
    mutate(d)
    with pytest.raises(ValueError, match=None) as ei:
        policy.table_from_doc(d, source="x.json")
    msg = str(ei.value)
    assert needle in msg and "\n" not in msg and msg.startswith("x.json")
    dec, why = policy.from_file("/nonexistent/scan.json")
    assert dec is None and "no such file" in why


# ------------------------------------------------------------------ the decider


def test_rank_agreement():
    """Two ranks fed the same events decide alike, cycle by cycle; reading the report (rank 0
    writes records) changes nothing."""
    ev = _events(3000)
    a, b = policy.PolicyDecider(_table()), policy.PolicyDecider(_table())
    ca = _drive(a, ev)
    for _ in range(0, 3000, 100):   # rank 0 takes a window now and then, rank 1 never
        a.take_window()
    cb = _drive(b, ev)
    assert ca == cb
    a2 = policy.PolicyDecider(_table())
    chosen = []
    pending, cur = None, 5
    for n, (bs, correct) in enumerate(ev):
        if pending:
            a2.observe(*pending)
        s = a2.choose(bs, cur, [0, 1, 2, 3, 4, 5])
        if n % 97 == 0:
            a2.take_window()
        chosen.append(s)
        cur = s
        pending = ([min(c, s) for c in correct], bs, s)
    assert chosen == ca
    assert a.rates() == b.rates() == a2.rates()


def test_picks_the_table_best_and_follows_acceptance():
    t = _table()
    dec = policy.PolicyDecider(t, explore_every=0)
    # the H200 table with its own acceptance: 5 steps at every load (the sweep agrees)
    assert {dec.choose(bs, 5, [0, 1, 2, 3, 4, 5]) for bs in (1, 8, 32, 64)} == {5}
    # drafts right at position 1 and never at 2: after enough verifies, 1 step wins at every load
    for _ in range(400):
        dec.observe([1] * 8, 8, 5)
    for _ in range(200):
        got = {bs: dec.choose(bs, 5, [0, 1, 2, 3, 4, 5]) for bs in (1, 8, 32)}
    assert set(got.values()) == {1}, got


def test_hysteresis_and_dwell():
    """Two candidates whose rates cross: no switch inside the dwell, none for a gain <= h %."""
    cells = [_cell(1, 8, 10.0), _cell(2, 8, 10.0 * 1.8 / 1.0)]   # 2 steps: 1.8x the cost
    t = policy.table_from_doc(_scan(cells))
    # at rate 0.8: E1 = 1.8 -> 0.18 /ms; E2 = 2.44 / 18 = 0.1356: 1 step wins
    dec = policy.PolicyDecider(t, explore_every=0, min_dwell=50, hysteresis_pct=5.0, prior_weight=1)
    assert dec.choose(8, 2, [1, 2]) == 1
    # now every draft is accepted: E1 = 2, E2 = 3 -> 0.2 vs 0.1667: 1 still wins (no switch)
    for _ in range(100):
        dec.observe([2] * 8, 8, 2)
    assert dec.choose(8, 1, [1, 2]) == 1
    # cost table where 2 steps beats 1 by 4 % at full acceptance: under h = 5 % it never switches
    cells = [_cell(1, 8, 10.0), _cell(2, 8, 14.42)]                # 3 / 14.42 = 0.208 vs 0.2 (+4 %)
    dec = policy.PolicyDecider(policy.table_from_doc(_scan(cells)), explore_every=0, min_dwell=5,
                               hysteresis_pct=5.0, prior_weight=1)
    assert dec.choose(8, 1, [1, 2]) == 1
    for _ in range(200):
        dec.observe([2] * 8, 8, 2)
    assert all(dec.choose(8, 1, [1, 2]) == 1 for _ in range(50))
    # h = 2 %: it switches, but only once the dwell of 5 cycles has passed
    dec = policy.PolicyDecider(policy.table_from_doc(_scan(cells)), explore_every=0, min_dwell=5,
                               hysteresis_pct=2.0, prior_weight=1)
    assert dec.choose(8, 1, [1, 2]) == 1          # cycle 1: the prior (0.8) says 1 step
    for _ in range(200):
        dec.observe([2] * 8, 8, 2)
    seq = [dec.choose(8, 1, [1, 2]) for _ in range(8)]
    assert seq == [1, 1, 1, 1, 2, 2, 2, 2], seq   # dwell: cycles 2..5 still 1, then 2
    assert dec.summary()["policy"]["switches"] == 1


def test_exploration_is_deterministic_and_rare():
    """Every K-th cycle of a tier runs the next larger candidate; the tier's choice stays."""
    t = _table()
    dec = policy.PolicyDecider(t, explore_every=10)
    for _ in range(2000):                            # make 2 steps the choice: position 3+ rejected
        dec.observe([2] * 8, 8, 5)
    seq = [dec.choose(8, 2, [1, 2, 3, 4, 5]) for _ in range(40)]
    base = max(set(seq), key=seq.count)
    assert [i for i, s in enumerate(seq) if s != base] == [9, 19, 29, 39]
    assert {seq[i] for i in (9, 19, 29, 39)} == {base + 1}
    # per tier: another batch size has its own count
    other = [dec.choose(32, 2, [1, 2, 3, 4, 5]) for _ in range(10)]
    assert other[9] != other[0] and other[:9] == [other[0]] * 9
    ex = dec.summary()["policy"]["explore"]
    assert sum(ex["8"].values()) == 4 and sum(ex["32"].values()) == 1
    # at the largest candidate there is nothing larger to explore
    dec2 = policy.PolicyDecider(t, explore_every=5)
    assert set(dec2.choose(1, 5, [3, 4, 5]) for _ in range(20)) == {5}


def test_step_zero_only_where_the_table_says_it_beats_one():
    # bs 1: 0 steps 5 ms (0.2 /ms) vs 1 step 1.8 / 6 = 0.3 -> 0 not allowed
    # bs 64: 0 steps 10 ms (0.1) vs 1 step 1.8 / 20 = 0.09 -> 0 allowed
    cells = [_cell(0, 1, 5.0), _cell(1, 1, 6.0), _cell(0, 64, 10.0), _cell(1, 64, 20.0)]
    t = policy.table_from_doc(_scan(cells))
    assert not t.zero_allowed(1) and t.zero_allowed(64)
    dec = policy.PolicyDecider(t, explore_every=0, prior_weight=1)
    assert dec.choose(64, 1, [0, 1]) == 0
    # even when online acceptance collapses, bs 1 never goes to 0: the table says 1 beats it
    for _ in range(500):
        dec.observe([0], 1, 1)
    assert all(dec.choose(1, 1, [0, 1]) == 1 for _ in range(100))
    # the H200 table: step 0 (SGLang's 0-step state) never beats 1 step
    h = _table()
    assert not any(h.zero_allowed(bs) for bs in (1, 8, 32, 64, 128))


def test_never_raises_into_sglang(capsys):
    dec = policy.PolicyDecider(_table())
    assert dec.choose(8, 3, [7, 9]) == 3 or dec.choose(8, 3, [7, 9]) in (7, 9)   # none costed: hold
    dec.observe(["x"], 8, 3)                          # bad input: warned, not raised
    assert dec.choose("?", 3, [1, 3]) == 3            # type: ignore[arg-type]
    assert "EAGLE3 warning" in capsys.readouterr().err


def test_control_record_shape():
    dec = policy.PolicyDecider(_table(), explore_every=4)
    _drive(dec, _events(200))
    w = dec.take_window()
    assert w["decider"] == "policy" and w["candidates"] == [0, 1, 2, 3, 4, 5]
    assert sum(n for d in w["choices"].values() for n in d.values()) == 200
    exp = w["policy"]["expected_per_stream_tok_s"]
    assert set(exp) <= set(w["choices"]) and all(v > 0 for d in exp.values() for v in d.values())
    assert dec.take_window()["choices"] == {}         # a window holds only its own cycles
    assert sum(n for d in dec.summary()["choices"].values() for n in d.values()) == 200


# ------------------------------------------------------------------ the simulator


def test_sim_ema_rule_matches_the_0_5_16_source():
    """The simulator's EMA slot == 0.5.16 AdaptiveStepSlot run from its source, step for step."""
    src_path = releases.fetch("0.5.16") / "sglang" / "srt" / "speculative" / "adaptive_spec_params.py"
    tree = ast.parse(src_path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AdaptiveStepSlot"]
    ns = {"math": __import__("math"), "logger": logging.getLogger("t"),
          "log_info_on_rank0": lambda *a, **k: None}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(src_path), "exec"), ns)  # noqa: S102
    rng = random.Random(5)
    for cfg in policy_sim.SGLANG_0516_DEFAULTS.values():
        real, ours = ns["AdaptiveStepSlot"](7, dict(cfg)), policy_sim.EmaSlot(7, dict(cfg))
        for _ in range(600):
            correct = [rng.choice([0, 0, 1, 2, 3, 5, 7]) for _ in range(rng.randint(1, 8))]
            assert real.update(correct) == ours.update(correct)
            assert real.current_steps == ours.current_steps
            assert real.ema_accept_len == ours.ema_accept_len


def test_sim_figures_deterministic_and_policy_holds_up():
    """No timed assert: the simulated tok/s are a pure function of the table and the seed. On the
    synthetic shape the policy is within 1 % of the best static at each steady load and above
    SGLang's default tiers; the figures are printed by benchmarks/policy_sim.py."""
    a = policy_sim.run("synthetic", 600)
    assert a == policy_sim.run("synthetic", 600)
    for name in ("steady 1", "steady 32", "steady 64"):
        w = a["workloads"][name]
        assert w["policy_vs_best_static_pct"] > -1.0, (name, w["policy_vs_best_static_pct"])
        assert w["policy_vs_defaults_pct"] >= 0.0


# ------------------------------------------------------------------ launch --policy


LAUNCH_RELEASES = ("0.5.9", "0.5.12.post1", "0.5.13", "0.5.16", "0.5.23")


@pytest.fixture()
def models(tmp_path, monkeypatch):
    # the release trees from the usual cache first; then the cache moves to tmp, where the
    # written adaptive config lands
    roots = {v: str(releases.fetch(v)) for v in LAUNCH_RELEASES}
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    t = write_model(tmp_path / "t", "LlamaForCausalLM")
    d = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    return {"t": str(t), "d": str(d), "scan": str(H200), "tmp": tmp_path, "roots": roots}


def _launch(models, version, *more, scan=None):
    return cli.main(["launch", "--sglang-root", models["roots"][version], "--model", models["t"],
                     "--draft", models["d"], "--policy", scan or models["scan"], "--no-sglang-check",
                     "--dry-run", *more])


@pytest.mark.parametrize("version,cands", [("0.5.16", [0, 1, 2, 3, 4, 5]), ("0.5.23", [0, 1, 2, 3, 4, 5]),
                                           ("0.5.13", [1, 2, 3, 4, 5])])
def test_launch_policy_argv_env_and_config(version, cands, models, capsys):
    assert _launch(models, version, "--policy-within", "100") == 0
    cap = capsys.readouterr()
    out = cap.out
    assert f"SGLANG_EAGLE3_POLICY={H200}" in out
    assert "--speculative-num-steps 5" in out and "--speculative-num-draft-tokens 6" in out
    assert "--speculative-eagle-topk 1" in out and "--speculative-adaptive" in out
    cfgs = list((Path(models["tmp"]) / "cache" / "policy").glob("adaptive-*.json"))
    assert len(cfgs) == 1 and str(cfgs[0]) in out
    assert json.loads(cfgs[0].read_text()) == {"1": {"candidate_steps": cands}}
    assert ("step 0 left out" in cap.err) == (version == "0.5.13")
    # the committed scan measured 0.5.16 with another target: said, not refused
    assert ("the scan measured SGLang 0.5.16" in cap.err) == (version != "0.5.16")
    # 5 steps is the table's fastest at every batch size and its largest: a larger count may win
    assert ("the scan's fastest step count per batch size: 5 at batch 1, 5 at batch 8, 5 at batch 32; "
            "at batch size 1, 8, 32 that is its largest candidate (5)") in " ".join(cap.err.split())


R4_8B = REPO / "docs/data/h200-2026-12-03-r9/r9d/scan-8b.json"  # round 4's 8B table, the policy's in round 9


@pytest.mark.parametrize("scan,more,states", [
    (None, [], [5]),                                        # 5 fastest everywhere, nothing within 5 %
    (R4_8B, [], [4, 5]),                                    # 4 within 5 % at batch 32 only
    (R4_8B, ["--", "--max-running-requests", "16"], [5]),   # ... which this server never reaches
    (R4_8B, ["--policy-within", "0", "--", "--max-running-requests", "32"], [5]),
    (R4_8B, ["--policy-within", "100"], [0, 1, 2, 3, 4, 5]),
])
def test_launch_policy_builds_only_the_states_the_table_can_choose(scan, more, states, models, capsys):
    """Round 9 (H200): six adaptive states stalled decode under open-loop churn where two did
    not; the policy's states are the step counts within --policy-within % of the table's best
    at some batch size up to the server's --max-running-requests (the scan's --within rule)."""
    assert _launch(models, "0.5.16", *more, scan=str(scan) if scan else None) == 0
    cap = capsys.readouterr()
    cfg = next((Path(models["tmp"]) / "cache" / "policy").glob("adaptive-*.json"))
    assert json.loads(cfg.read_text()) == {"1": {"candidate_steps": states}}
    err = " ".join(cap.err.split())
    assert f"--speculative-num-steps {max(states)}" in cap.out
    if len(states) < 6:
        assert f"policy: states for {states} only" in err and "--policy-within 100 builds them all" in err
    assert ("policy: one state: the policy runs 5 steps at every batch size" in err) == (states == [5])


def test_launch_policy_states_rule_matches_the_scans_within():
    """The same default as the scan's adaptive-config rule (tune may not be imported by serve),
    and the same tiers where both look at the same batch sizes."""
    from sglang_eagle3_ext.serve import policy_launch
    from sglang_eagle3_ext.tune import adaptive

    assert policy_launch.DEFAULT_WITHIN_PCT == adaptive.DEFAULT_WITHIN_PCT
    table = policy.load_table(R4_8B)
    per_bs = policy_launch.reachable(table, 5, 32)
    tiers = json.loads((R4_8B.parent / "adaptive-scan-8b.json").read_text())  # the scan's own writing
    for bs, entry in tiers.items():
        assert per_bs[int(bs)] == entry["candidate_steps"], bs


@pytest.mark.parametrize("bad", ["101", "-1", "x"])
def test_launch_policy_within_bad_is_one_line(bad, models, capsys):
    with pytest.raises(SystemExit) if bad == "x" else _nothing():
        rc = _launch(models, "0.5.16", "--policy-within", bad)
        assert rc == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("--policy-within" in err)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_launch_policy_reach_note_only_at_the_edge(models, capsys):
    """The H200 MoE scan (steps 0..4, 3 fastest at 1 and 8 streams): nothing to say."""
    moe = Path(__file__).resolve().parents[1] / "docs/data/h200-2026-12-02-r5/moe2/scan-moe/scan.json"
    assert _launch(models, "0.5.23", scan=str(moe)) == 0
    err = capsys.readouterr().err
    assert "policy: " in err and "fastest step count" not in err


def test_launch_policy_reach_note_says_what_the_table_says_per_batch_size(models, capsys, tmp_path):
    """Issue 33: the note said "at every batch size" where batch 1's fastest was 4 of 5 steps."""
    doc = json.loads(Path(models["scan"]).read_text())
    for c in doc["cells"]:
        if c["bs"] == 1 and c["steps"] == 4:
            c["cycle_ms"] = c["cycle_ms"] / 1.5  # 4 steps now fastest at batch 1 only
    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(doc))
    assert _launch(models, "0.5.23", scan=str(scan)) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "per batch size: 4 at batch 1, 5 at batch 8, 5 at batch 32; at batch size 8, 32 that is" in err


@pytest.mark.parametrize("version,more,needle", [
    ("0.5.12.post1", [], "lands two batches late"),
    ("0.5.9", [], "no adaptive speculation"),
    ("0.5.23", ["--adaptive", "x.json"], "--policy with --adaptive"),
    ("0.5.23", ["--steps", "3", "--topk", "2", "--draft-tokens", "4"], "topk 1 only"),
    ("0.5.23", ["--", "--speculative-adaptive"], "give --policy alone"),
])
def test_launch_policy_refusals(version, more, needle, models, capsys):
    assert _launch(models, version, *more) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


def test_launch_policy_refuses_the_hold_schedule(models, capsys, monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE3_HOLD", "50")
    assert _launch(models, "0.5.23") == 2
    assert "SGLANG_EAGLE3_HOLD set" in capsys.readouterr().err


def test_launch_policy_bad_scan_one_line(models, capsys):
    bad = Path(models["tmp"]) / "bad.json"
    bad.write_text(json.dumps({"schema": "eagle3_sweep/1"}))
    assert _launch(models, "0.5.23", scan=str(bad)) == 2
    err = capsys.readouterr().err
    assert "not a scan result" in err and len(err.strip().splitlines()) == 1
    assert _launch(models, "0.5.23", scan=str(Path(models["tmp"]) / "none.json")) == 2
    assert "no such file" in capsys.readouterr().err


def test_make_decider_for_a_live_controller():
    """What stepctl's init hook calls once SGLang built its states (ControllerInfo stand-in)."""

    class Info:
        built = (0, 1, 2, 3, 4, 5)
        cuda_graph_bs = (1, 2, 4, 8, 16, 32)

    dec = policy.make_decider(Info(), H200)
    assert dec.name == "policy" and dec.candidates == [0, 1, 2, 3, 4, 5]
    assert policy.pad_batch(9, dec.table.graph_bs) == 16 and dec.table.cycle_ms(5, 9) == dec.table.cycle_ms(5, 16)
    assert "candidates [0, 1, 2, 3, 4, 5]" in dec.describe()
    Info.cuda_graph_bs = None                          # graphs off: no padding
    assert policy.make_decider(Info(), H200).table.graph_bs is None
    Info.built = (7, 9)
    with pytest.raises(ValueError, match="none of the server's states"):
        policy.make_decider(Info(), H200)
    with pytest.raises(ValueError, match="SGLANG_EAGLE3_POLICY"):
        policy.make_decider(Info(), None)


# ------------------------------------------------------------------ visibility


def _policy_records(n_windows: int = 3) -> list[dict]:
    """Windows as the probes write them with the policy installed: stepctl.control() gives the
    head and the policy part (the decider is real; the cycles are synthetic)."""
    from sglang_eagle3_ext.runtime import stepctl

    dec = policy.PolicyDecider(_table(), explore_every=8)
    stepctl.install(dec)
    try:
        recs = []
        for w in range(n_windows):
            _drive(dec, _events(100, seed=w))
            head = stepctl.control()
            recs.append({"schema": "eagle3_prof/3", "window": w + 2, "control": head, "by_key": {
                "s5.k1.d6.b8.g": {"steps": 5, "topk": 1, "draft_tokens": 6, "bs": 8, "graph": True,
                                  "cycles": 50, "requests": 400, "accepted_drafts": 1200,
                                  "phases": {p: {"mean_ms": 8.0 if p == "cycle" else 2.0, "p50_ms": 1.0,
                                                 "p90_ms": 1.0}
                                             for p in ("draft", "verify", "extend", "other", "cycle")},
                                  "per_stream_tok_s": 500.0}}})
        return recs
    finally:
        stepctl.install(None)


def test_records_profile_and_report_show_the_choices():
    from sglang_eagle3_ext.measure import accounting, policy_report

    recs = _policy_records()
    head = recs[0]["control"]
    assert head["decider"] == "policy" and head["candidates"] == [0, 1, 2, 3, 4, 5]
    assert sum(n for by in head["policy"]["chosen"].values() for n in by.values()) == 100
    ctl = accounting.control_summary(recs)
    pol = ctl["policy"]
    assert sum(n for by in pol["cycles"].values() for n in by.values()) == 300
    rows = policy_report.rows({"control": ctl, "by_key": accounting.by_key_summary(recs)})
    r8 = [r for r in rows if r["bs"] == 8 and r["steps"] == 5]
    assert r8 and r8[0]["realised_per_stream_tok_s"] == 500.0  # 4 tokens / 8 ms and r8[0]["expected_per_stream_tok_s"] > 0
    assert r8[0]["realised_vs_expected_pct"] is not None
    assert all(r["explore"] <= r["cycles"] for r in rows) and sum(r["explore"] for r in rows) > 0


def test_metrics_beside_spec_num_steps(tmp_path, monkeypatch):
    """The policy's families on SGLang's /metrics, read back through prometheus_client's
    multiprocess collector (as tests/test_metrics.py does)."""
    prom = pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess, values
    from prometheus_client.parser import text_string_to_metric_families

    from sglang_eagle3_ext.runtime.probes import metrics

    d = tmp_path / "prom"
    d.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(d))
    monkeypatch.setattr(values, "ValueClass", values.get_value_class())
    try:
        metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1"})
        metrics.register_families({"model_name": "m", "tp_rank": "0", "pp_rank": "0"})
        rec = _policy_records(1)[0]
        rec.update(cycles=100, requests=800, tokens=2000, phases={})
        metrics.publish(rec)
        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
        cyc = fams["sglang:eagle3_policy_cycles"].samples
        assert sum(s.value for s in cyc if s.name.endswith("_total")) == 100
        chosen = rec["control"]["policy"]["chosen"]
        want = {metrics.batch_bucket(int(bs)) for bs in chosen}
        assert {s.labels["batch_size"] for s in fams["sglang:eagle3_policy_steps"].samples} == want
        assert all(s.value > 0 for s in fams["sglang:eagle3_policy_expected_stream_tokens_per_second"].samples)
        assert prom is not None
    finally:
        metrics.reset(environ={})


def test_end_to_end_through_stepctl_probes_and_profile(tmp_path, monkeypatch, capsys):
    """stepctl's init hook builds the policy from SGLANG_EAGLE3_POLICY; the real profiler writes
    eagle3_prof/3 windows (scripted clock, fake controller: tests/test_probe_keys.py's harness);
    `profile` prints what the policy chose, expected next to realised."""
    from test_probe_keys import STEP_MS, VERIFY_MS, _run, _start
    from test_stepctl import FakeController

    from sglang_eagle3_ext.runtime import probes, stepctl
    from sglang_eagle3_ext.runtime.plugin import procstate

    scan = tmp_path / "scan.json"
    cyc = {s: VERIFY_MS + 1.0 + 0.5 + STEP_MS * s for s in (1, 3)}       # the harness' cycle ms
    scan.write_text(json.dumps(_scan([_cell(1, 2, cyc[1], 0.5), _cell(3, 2, cyc[3], 0.9)])))
    monkeypatch.setenv("SGLANG_EAGLE3_POLICY", str(scan))
    monkeypatch.setattr(procstate._S, "missing", [])
    ctrl = FakeController(built=(1, 3), start=3)
    try:
        stepctl.init_hook("policy", list)(lambda self: None, ctrl)
        assert isinstance(stepctl.installed(), policy.PolicyDecider)
        clock = _start(tmp_path, 10)
        _run(ctrl, clock, 30)
        probes.flush()
    finally:
        stepctl.install(None)
        probes.reset(environ={})
    recs = [json.loads(x) for x in (tmp_path / "prof.jsonl").read_text().splitlines()]
    assert all(r["control"]["decider"] == "policy" for r in recs)
    assert sum(n for r in recs for by in r["control"]["policy"]["chosen"].values() for n in by.values()) == 30
    # the decider's own count agrees with the probes' tags, cycle for cycle
    tags = {}
    for r in recs:
        for bs, by in r["control"]["choices"].items():
            for s, n in by.items():
                tags[(bs, s)] = tags.get((bs, s), 0) + n
    mine = {}
    for r in recs:
        for bs, by in r["control"]["policy"]["chosen"].items():
            for s, n in by.items():
                mine[(bs, s)] = mine.get((bs, s), 0) + n
    assert mine == tags
    assert cli.main(["profile", str(tmp_path / "prof.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Throughput policy" in out and "expected" in out


def test_scan_cells_as_the_scan_writes_them():
    """The scan keeps the drain batch sizes of a level (few cycles) and per_position None where no
    request reached a position: thin cells do not bend the cost curve, None rates are skipped."""
    cells = [dict(_cell(3, 8, 10.0), cycles=400, level=8), dict(_cell(3, 32, 20.0), cycles=400, level=32),
             dict(_cell(3, 20, 99.0), cycles=3, level=32),                     # a drain batch: noise
             dict(_cell(3, 1, 8.0), cycles=300, level=1, per_position=[0.9, None, None]),
             dict(_cell(1, 8, 7.0), cycles=5, level=8)]                         # only a thin cell: kept
    t = policy.table_from_doc(_scan(cells))
    assert t.cycle_ms(3, 20) == pytest.approx(10.0 + 10.0 * (20 - 8) / 24)
    assert t.cycle_ms(1, 8) == 7.0
    assert 0.8 < t.prior[0] < 0.9 and t.prior[1] == pytest.approx(0.8)


def test_policy_over_a_static_preset_and_as_a_preset_key(models, capsys):
    preset = Path(models["tmp"]) / "static.yaml"
    preset.write_text(f"model: {models['t']}\ndraft: {models['d']}\nsteps: 3\ntopk: 4\ndraft_tokens: 8\n")
    rc = cli.main(["launch", "--sglang-root", models["roots"]["0.5.23"], str(preset), "--policy", models["scan"],
                   "--no-sglang-check", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "--speculative-eagle-topk 1" in out and "--speculative-num-steps 5" in out
    keyed = Path(models["tmp"]) / "p.yaml"
    keyed.write_text(f"model: {models['t']}\ndraft: {models['d']}\npolicy: {models['scan']}\n")
    rc = cli.main(["launch", "--sglang-root", models["roots"]["0.5.23"], str(keyed), "--no-sglang-check", "--dry-run"])
    assert rc == 0 and f"SGLANG_EAGLE3_POLICY={H200}" in capsys.readouterr().out


def test_transition_figure_from_committed_ladders():
    """benchmarks/transition.py on the H200 round-3 ladders: whole-run tok/s = all completion
    tokens / all wall time of run r over every level, a t-interval over the 3 runs."""
    import transition

    lad = REPO / "docs/data/h200-2026-12-01/8b-p08/p08/configs/eagle3-s5-k1-d6-no-nccl/ladder.json"
    doc = json.loads(lad.read_text())
    got = transition.whole_run(doc)
    runs = {}
    for lv in doc["levels"]:
        for r in lv["bench"]["runs"]:
            t, w = runs.get(r["index"], (0.0, 0.0))
            runs[r["index"]] = (t + r["completion_tokens"], w + r["wall_s"])
    want = sum(t / w for t, w in runs.values()) / len(runs)
    assert got["runs"] == 3 and got["order"] == [1, 8, 32] and got["tok_s"] == pytest.approx(want, abs=0.05)
    assert got["interval"][0] < got["tok_s"] < got["interval"][1]
    with pytest.raises(ValueError, match="not a ladder"):
        transition.whole_run({"levels": []})


def test_transition_paired_by_run_index(capsys):
    """benchmarks/transition.py --paired on the H200 round-8 MoE ladders (every server sent the
    same `tiny --paths` prompts as run r of a level): per server and level, the median over its
    rounds per run index, and the run-by-run ratio to the base server; an unknown base is one line
    and exit 2."""
    import statistics

    import transition

    files = sorted((REPO / "docs/data/h200-2026-12-02-r8/moe5").glob("*/transition-r*.json"))
    got = transition.paired({n: [json.loads(p.read_text()) for p in files if p.parent.name == n]
                             for n in ("policy", "static3")}, "static3")
    want = {}
    for name in ("policy", "static3"):
        per = [next(r["decode_tok_s"] for lv in json.loads(p.read_text())["levels"] if lv["concurrency"] == 8
                    for r in lv["bench"]["runs"] if r["index"] == 2) for p in files if p.parent.name == name]
        want[name] = statistics.median(per)
    assert got["policy"]["levels"]["8"]["by_run"][2] == pytest.approx(want["policy"], abs=0.05)
    lo, hi = got["policy"]["levels"]["whole"]["range_pct"]
    assert got["policy"]["rounds"] == 2 and lo <= got["policy"]["levels"]["whole"]["vs_base_pct"] <= hi
    assert got["static3"]["levels"]["1"]["vs_base_pct"] == 0.0
    assert transition.main([*map(str, files), "--paired", "static9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such server" in err[0]


def test_server_refuses_a_policy_that_was_not_applied(tmp_path):
    """A LaunchConfig with ``policy`` set but never passed through flags.validate (no adaptive
    config, no SGLANG_EAGLE3_POLICY) would start a static server that looks like the policy: the
    H200 round-5 campaign did exactly that. Server.start refuses it before spawning anything."""
    from sglang_eagle3_ext.runtime.errors import UserError
    from sglang_eagle3_ext.serve import server
    from sglang_eagle3_ext.serve.launch_config import LaunchConfig

    cfg = LaunchConfig(model=str(tmp_path), policy=str(tmp_path / "scan.json"), log=str(tmp_path / "s.log"))
    with pytest.raises(UserError, match="not applied"):
        server.Server(cfg).start(wait=False)
    assert not (tmp_path / "s.log").exists()
    # applied (what flags.validate sets): start gets past this check, to the port check
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cfg.env["SGLANG_EAGLE3_POLICY"] = str(tmp_path / "scan.json")
        cfg.host, cfg.port = "127.0.0.1", busy.getsockname()[1]
        with pytest.raises(UserError, match="already in use"):
            server.Server(cfg).start(wait=False)


def test_path_bias_of_the_acceptance_model_on_the_moe_construction(capsys):
    """benchmarks/policy_path_bias.py (the H200 round-7 MoE diagnosis, docs/results.md): the
    expected tokens the policy derives at 3..6 steps from rates counted at 7 steps, against the
    chains on the same requests, exact on the construction's own maps (pure Python), and the step
    count each ranks first with the H200 scan's cycle ms. One repeated chat request: 3 steps
    3.113 vs 3.200 (-2.7 %), and at 8 streams the model ranks 7 first where 3 is faster (what the
    H200 policy did); 200 random paths and the `tiny --paths 32` prompts: within 2 %, right at
    1 and 8 streams (7 and 3)."""
    import policy_path_bias as ppb

    assert ppb.main(["--requests", "200"]) == 0
    out = capsys.readouterr().out
    one, rest = out.split("200 paths:")
    many, tp = rest.split("tiny --paths 32 prompts:")
    assert "3 steps: model 3.113 vs the 3-step chain 3.200 (-2.7 %)" in one
    assert "at 8 stream(s), H200 MoE cycle ms: the model ranks 7 steps first, the chains 3 (WRONG" in one
    for case in (many, tp):
        errs = [float(x.split("(")[1].split(" %")[0]) for x in case.splitlines() if "model" in x and "chain " in x]
        assert len(errs) == 4 and max(abs(e) for e in errs) < 2.0
        assert "1 stream(s), H200 MoE cycle ms: the model ranks 7 steps first, the chains 7 (right)" in case
        assert "8 stream(s), H200 MoE cycle ms: the model ranks 3 steps first, the chains 3 (right)" in case


def test_walk_acceptance_is_the_constructions_greedy_decoding():
    """policy_sim's Walk (acceptance from the tiny maps) gives, for one request, exactly
    construct.simulate_request's verifies: the same greedy speculative decoding."""
    from sglang_eagle3_ext.tiny import construct

    f, g, _ = construct.partial_maps(0.8, 0, 32000)
    for steps in (3, 7):
        st = policy_sim.WalkState(policy_sim.Walk(f, g, [198], max_tokens=256))
        verifies = 0
        while st.next < 2:  # until the first request's slot is handed to the next prompt
            st.step(1, steps)
            verifies += 1
        assert verifies == sum(construct.simulate_request(f, g, steps, 198, 256)[2])


def test_walks_replay_round_7_and_predict_the_paths_build():
    """benchmarks/policy_sim.py --walks (docs/guide/adaptive.md): on the one chat path the best static
    count changes with load (7 at 1 stream, 3 at 8) and the policy stays below static 3 at 8 (as
    on the H200); cycling through the tiny --paths 32 prompts, the policy's whole 1 -> 8 run is
    above every static count and both EMA configurations (a simulation, not a measurement)."""
    res = policy_sim.run_walks()
    one, many = res["cases"].values()
    assert one["best_static_at"] == {"1": "static 7", "8": "static 3"}
    assert one["arms"]["policy"]["per_stream"]["8"] < 0.98 * one["arms"]["static 3"]["per_stream"]["8"]
    pol = many["arms"]["policy"]["tok_s"]
    assert all(pol > r["tok_s"] for name, r in many["arms"].items() if name != "policy")


def test_walks_on_round_8_costs_match_the_h200_choice():
    """--walks on round 8's scan (measured on the tiny --paths 32 traffic): the simulated policy
    takes each load's best static count (7 at 1 stream, 3 at 8), within 1 % of it per load, and is
    above every other arm over the whole run, as the H200 measured (docs/results.md round 8;
    a simulation, not a measurement)."""
    res = policy_sim.run_walks(scan=policy_sim.MOE_R8)
    many = list(res["cases"].values())[1]
    assert many["best_static_at"] == {"1": "static 7", "8": "static 3"}
    pol = many["arms"]["policy"]
    for lv, best in many["best_static_at"].items():
        assert pol["per_stream"][lv] >= 0.99 * many["arms"][best]["per_stream"][lv]
    assert all(pol["tok_s"] > r["tok_s"] for name, r in many["arms"].items() if name != "policy")
    assert {3, 7} <= set(pol["steps"])
    # the H200 figures printed beside it are the committed ladders' (transition.py --paired)
    import transition

    folders = {"policy": "policy", "static 3": "static3", "static 7": "static7",
               "EMA, SGLang 0.5.16 default tiers": "ema-default", "EMA, adaptive-write tiers": "ema-scan"}
    files = sorted((REPO / "docs/data/h200-2026-12-02-r8").glob("moe5*/*/transition-r*.json"))
    got = transition.paired({f: [json.loads(p.read_text()) for p in files if p.parent.name == f]
                             for f in folders.values()}, "static3")
    for arm, fig in policy_sim.H200_R8.items():
        lv = got[folders[arm]]["levels"]
        for i, key in enumerate(("1", "8", "whole")):
            assert sum(lv[key]["by_run"].values()) / 3 == pytest.approx(fig[i], abs=0.1), (arm, key)


def test_policy_sim_bad_scan_is_one_line(tmp_path, capsys):
    """benchmarks/policy_sim.py on a missing, binary or foreign file: one line naming it, exit 2."""
    (tmp_path / "bin.json").write_bytes(b"\x00\xff")
    (tmp_path / "other.json").write_text('{"schema": "x"}')
    for args in (["--walks", str(tmp_path / "none.json")], ["--walks", str(tmp_path / "bin.json")],
                 ["--table", str(tmp_path / "other.json")]):
        assert policy_sim.main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(tmp_path) in err[0], err


def test_launch_policy_notes_survive_the_dry_runs_second_pass(models, capsys):
    """A dry run whose SGLang check cannot import SGLang (this CPU box: no torchvision) validates
    again without it; that second pass once found --policy's config already written into the
    config and printed none of the policy's notes."""
    rc = cli.main(["launch", "--model", models["t"], "--draft",
                   models["d"], "--policy", models["scan"], "--dry-run"])
    assert rc == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "policy: states for [5] only" in err and "policy: one state" in err
    assert err.count("note: policy: ") >= 3
