"""analysis: break-even, cost-model fit, prediction from one run (all hand-computed numbers)."""

from __future__ import annotations

import pytest

from sglang_eagle3_ext.measure import analysis
from sglang_eagle3_ext.runtime.errors import UserError


def test_break_even_for_the_seeds_five_step_cycle():
    # seeds: 5-step cycle 31.74 ms against the NCCL-tuned 88.8 tok/s baseline
    assert round(analysis.break_even_accept_len(31.74, 88.8), 2) == 2.82
    with pytest.raises(UserError):
        analysis.break_even_accept_len(0, 88.8)


def test_cost_model_recovers_known_constants():
    exact = [(k, 20.0 + 0.75 * k) for k in (1, 2, 3, 5, 7)]
    m = analysis.fit_cost_model(exact)
    assert m.c0 == pytest.approx(20.0) and m.cd == pytest.approx(0.75)
    assert m.residual_ms == pytest.approx(0.0, abs=1e-9) and m.n == 5
    assert m.cycle_ms(4) == pytest.approx(23.0)
    # symmetric noise around the same line: same fit, RMS residual = the noise amplitude
    noisy = [(k, 20.0 + 0.75 * k + s) for k in (1, 2, 5) for s in (-0.3, 0.3)]
    m = analysis.fit_cost_model(noisy)
    assert m.c0 == pytest.approx(20.0) and m.cd == pytest.approx(0.75)
    assert m.residual_ms == pytest.approx(0.3)
    with pytest.raises(UserError, match="two different step counts"):
        analysis.fit_cost_model([(5, 31.7), (5, 31.8)])


RECORD = {
    "spec": {"steps": 3, "topk": 1, "draft_tokens": 4},
    "per_position": [0.8, 0.5, 0.2],
    "phases": {"draft": {"mean_ms": 3.0}, "verify": {"mean_ms": 20.0}, "extend": {"mean_ms": 1.0},
               "other": {"mean_ms": 0.5}, "cycle": {"mean_ms": 24.5}},
}


def test_prediction_from_one_run_matches_hand_computation():
    rows = analysis.predict_from_run(RECORD, baseline_step_ms=12.5)
    base, k1, k2, k3 = rows
    assert (base.kind, base.steps, base.accept_len, base.tok_s) == ("baseline", 0, 1.0, 80.0)
    # fixed = 20 + 1 + 0.5 = 21.5 ms; draft = 1 ms per step
    assert (k1.accept_len, k1.cycle_ms) == (pytest.approx(1.8), pytest.approx(22.5))
    assert k1.tok_s == pytest.approx(80.0) and k1.vs_baseline_pct == pytest.approx(0.0)
    assert (k2.accept_len, k2.cycle_ms) == (pytest.approx(2.2), pytest.approx(23.5))
    assert k2.tok_s == pytest.approx(2200 / 23.5) and k2.vs_baseline_pct == pytest.approx((2200 / 23.5 / 80 - 1) * 100)
    assert (k3.accept_len, k3.cycle_ms, k3.kind) == (pytest.approx(2.28), pytest.approx(24.5), "measured")
    assert [r.draft_tokens for r in rows] == [None, 2, 3, 4]
    sentence = analysis.recommend(rows)
    assert sentence.startswith("Run --speculative-num-steps 2 ") and "+17.0% vs the no-spec baseline" in sentence
    assert "+0.6% vs the measured 3 steps" in sentence


def test_prediction_says_when_nothing_beats_the_baseline():
    rows = analysis.predict_from_run(RECORD, baseline_step_ms=10.0)  # 100 tok/s baseline
    s = analysis.recommend(rows)
    assert s.startswith("No step count beats the no-spec baseline (100.0 tok/s")
    assert "needs accept length 2.35" in s  # 23.5 ms x 100 tok/s / 1000


def test_prediction_refuses_trees_and_runs_without_positions():
    with pytest.raises(UserError, match="topk 1"):
        analysis.predict_from_run({**RECORD, "spec": {"steps": 3, "topk": 4, "draft_tokens": 8}})
    with pytest.raises(UserError, match="per-position"):
        analysis.predict_from_run({**RECORD, "per_position": []})


def test_cost_model_prediction_and_accept_len_from_rates():
    assert analysis.accept_len_from_rates([0.8, 0.5, None], 3) == pytest.approx(2.2)
    m = analysis.CostModel(c0=21.5, cd=1.0, residual_ms=0.0, n=3)
    rows = analysis.predict_with_cost_model(m, [0.8, 0.5, 0.2], 3)
    assert [round(r.tok_s, 3) for r in rows] == [80.0, round(2200 / 23.5, 3), round(2280 / 24.5, 3)]
    assert all(r.kind == "predicted" for r in rows)
