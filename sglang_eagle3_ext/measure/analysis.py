"""Arithmetic behind the recommendations: break-even, the cycle cost model, prediction from one run.

Definitions (docs/reference/architecture.md "Conventions"): accept length = tokens per request per verify
cycle, incl. the bonus token; speculation beats a no-spec baseline when
accept_len > cycle_ms x baseline_tok_s / 1000.

Prediction from one run (topk 1 chain): with greedy drafting the draft at position i does not
depend on how many steps follow it, so a run at k steps also tells what k' < k steps would
accept: accept_len(k') = 1 + sum_{i<=k'} prod_{j<=i} r_j with r_j the conditional acceptance at
position j. Cycle time is modelled as the measured verify + re-extend + other (nearly flat in k;
the seeds measured verify 28.7 ms at 3 draft tokens vs 25.6 ms at 6) plus k' x draft ms per step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..runtime.errors import UserError


def break_even_accept_len(cycle_ms: float, baseline_tok_s: float) -> float:
    """Accept length (incl. bonus) at which a cycle of ``cycle_ms`` matches the baseline."""
    if not (cycle_ms > 0 and baseline_tok_s > 0):
        raise UserError(f"break-even needs a positive cycle time and baseline tok/s "
                        f"(got {cycle_ms!r} ms, {baseline_tok_s!r} tok/s)", exit_code=2)
    return cycle_ms * baseline_tok_s / 1000.0


@dataclass(frozen=True)
class CostModel:
    """cycle_ms ~ c0 + steps x cd, least squares; ``residual_ms`` is the RMS misfit."""

    c0: float
    cd: float
    residual_ms: float
    n: int

    def cycle_ms(self, steps: int) -> float:
        return self.c0 + steps * self.cd

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def fit_cost_model(points: Sequence[tuple[int, float]]) -> CostModel:
    """Fit cycle time against the number of draft steps over (steps, cycle_ms) points."""
    pts = [(float(k), float(ms)) for k, ms in points]
    if len(pts) < 2 or len({k for k, _ in pts}) < 2:
        raise UserError("the cost model needs cycle times for at least two different step counts",
                        exit_code=2)
    n = len(pts)
    mk = sum(k for k, _ in pts) / n
    mc = sum(c for _, c in pts) / n
    sxx = sum((k - mk) ** 2 for k, _ in pts)
    sxy = sum((k - mk) * (c - mc) for k, c in pts)
    cd = sxy / sxx
    c0 = mc - cd * mk
    rms = math.sqrt(sum((c - (c0 + cd * k)) ** 2 for k, c in pts) / n)
    return CostModel(c0=c0, cd=cd, residual_ms=rms, n=n)


@dataclass(frozen=True)
class Prediction:
    """One row of a prediction table. ``steps`` 0 is the no-spec baseline."""

    steps: int
    draft_tokens: int | None
    accept_len: float
    cycle_ms: float
    tok_s: float
    vs_baseline_pct: float | None
    kind: str  # "measured" (the run's own k), "predicted", "baseline"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def accept_len_from_rates(rates: Sequence[float | None], steps: int) -> float:
    """Expected tokens per verify (incl. bonus) of a chain of ``steps`` drafts."""
    total, p = 1.0, 1.0
    for r in rates[:steps]:
        p *= r if r is not None else 0.0
        total += p
    return total


def pooled_rates(keys: Sequence[tuple[int, Mapping[Any, Any]]]) -> list[float | None]:
    """Conditional acceptance per position, pooled over several step counts of one batch size.

    ``keys``: (steps, accept histogram) of topk-1 chains. With greedy drafting the first k draft
    tokens do not depend on how many follow, so every cycle that ran at least k steps observed
    position k exactly: a cycle that accepted n reached positions 1..min(n + 1, steps) and
    accepted 1..n. Each position's rate is accepted / reached over all of them (a position no
    chain ran is None)."""
    top = max((s for s, _ in keys), default=0)
    reached, accepted = [0] * top, [0] * top
    for steps, hist in keys:
        for n, c in hist.items():
            n, c = int(n), int(c)
            for k in range(min(n + 1, steps)):
                reached[k] += c
            for k in range(min(n, steps)):
                accepted[k] += c
    return [round(a / r, 6) if r else None for a, r in zip(accepted, reached, strict=True)]


def model_check(rates: Sequence[float | None], measured: Mapping[int, float]) -> list[dict[str, Any]]:
    """The per-position model against the step counts measured on the same traffic: what the
    model's error is here (on one repeated text the cycle starts of a chain depend on its step
    count, so the model misses by a few %: docs/guide/profiling.md)."""
    out = []
    for steps in sorted(measured):
        if not steps or measured[steps] is None or len(rates) < steps or any(r is None for r in rates[:steps]):
            continue
        m = accept_len_from_rates(rates, steps)
        out.append({"steps": steps, "model_accept_len": round(m, 4), "measured_accept_len": measured[steps],
                    "diff_pct": round((m / measured[steps] - 1) * 100, 2)})
    return out


def cost_basis(rec: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The phase times a cost figure should use, and what they are made of: a
    ``accounting.summarize`` result says (``basis``); a raw ``eagle3_prof/2`` window record gives
    its steady cycles; an ``eagle3_prof/1`` record (no split) falls back to all cycles."""
    if "basis" in rec:
        return rec.get("phases") or {}, str(rec["basis"])
    st = rec.get("steady") or {}
    if st.get("phases") and st.get("cycles"):
        return st["phases"], "steady"
    return rec.get("phases") or {}, "all"


def _mean(rec: Mapping[str, Any], phase: str) -> float:
    try:
        v = cost_basis(rec)[0][phase]["mean_ms"]
    except (KeyError, TypeError):
        v = None
    if v is None:
        raise UserError(f"the run has no {phase} time; prediction needs draft, verify, extend and other", exit_code=2)
    return float(v)


def _rows(rates: Sequence[float | None], k: int, cycle_of: Any, baseline_step_ms: float | None,
          measured_k: int | None, measured_al: float | None = None) -> list[Prediction]:
    base_tps = 1000.0 / baseline_step_ms if baseline_step_ms else None
    rows = []
    if baseline_step_ms:
        rows.append(Prediction(0, None, 1.0, baseline_step_ms, base_tps, 0.0, "baseline"))
    for kp in range(1, k + 1):
        al = measured_al if (kp == measured_k and measured_al) else accept_len_from_rates(rates, kp)
        cyc = cycle_of(kp)
        tps = al * 1000.0 / cyc
        rows.append(Prediction(kp, kp + 1, al, cyc, tps,
                               (tps / base_tps - 1.0) * 100.0 if base_tps else None,
                               "measured" if kp == measured_k else "predicted"))
    return rows


def predict_from_run(record: Mapping[str, Any], baseline_step_ms: float | None = None,
                     measured_accept_len: float | None = None) -> list[Prediction]:
    """Rows for k' = 1..k from one profiled run at k steps (topk 1), plus the baseline if known.

    ``measured_accept_len``: the k-step row's own measurement, when ``per_position`` was pooled
    over other chains too (then the model does not give it back exactly).
    ``record`` is an ``eagle3_prof`` window record or a ``accounting.summarize`` result; the
    cycle time is its steady-state one where the record has the split (``cost_basis``), since
    request starts are not part of the decode rate a client sees.
    """
    rates = list(record.get("per_position") or [])
    spec = record.get("spec") or {}
    if not rates:
        raise UserError("the run has no per-position acceptance (a legacy block, or no accept counts "
                        "reached the probes); profile it again with the probes", exit_code=2)
    topk = spec.get("topk")
    if topk not in (None, 1):
        raise UserError(f"prediction needs a topk 1 chain run; this run used topk {topk}", exit_code=2)
    k = int(spec.get("steps") or len(rates))
    if len(rates) < k:
        rates += [None] * (k - len(rates))
    if baseline_step_ms is not None and baseline_step_ms <= 0:
        raise UserError(f"--baseline-step-ms must be positive (got {baseline_step_ms})", exit_code=2)
    draft_per_step = _mean(record, "draft") / k
    fixed = _mean(record, "verify") + _mean(record, "extend") + _mean(record, "other")
    return _rows(rates, k, lambda kp: fixed + kp * draft_per_step, baseline_step_ms, k, measured_accept_len)


def predict_with_cost_model(model: CostModel, rates: Sequence[float | None], max_steps: int,
                            baseline_step_ms: float | None = None) -> list[Prediction]:
    """Rows for k' = 1..max_steps from a fitted cost model and a measured acceptance profile."""
    return _rows(list(rates) + [None] * max(0, max_steps - len(rates)), max_steps,
                 model.cycle_ms, baseline_step_ms, None)


def recommend(preds: Sequence[Prediction]) -> str:
    """One sentence: which step count to run, or that none beats the baseline."""
    spec = [p for p in preds if p.kind != "baseline"]
    if not spec:
        return "Nothing to recommend: no speculative configuration in the table."
    best = max(spec, key=lambda p: p.tok_s)
    base = next((p for p in preds if p.kind == "baseline"), None)
    measured = next((p for p in spec if p.kind == "measured"), None)
    what = (f"--speculative-num-steps {best.steps} --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens {best.draft_tokens}")
    if base is not None and best.tok_s <= base.tok_s:
        need = break_even_accept_len(best.cycle_ms, base.tok_s)
        return (f"No step count beats the no-spec baseline ({base.tok_s:.1f} tok/s; best is "
                f"{best.steps} steps at {best.tok_s:.1f} tok/s, which needs accept length {need:.2f} "
                f"to break even vs {best.accept_len:.2f}): serve without speculation or improve the draft.")
    tail = []
    if base is not None:
        tail.append(f"{best.vs_baseline_pct:+.1f}% vs the no-spec baseline")
    if measured is not None and measured is not best:
        tail.append(f"{(best.tok_s / measured.tok_s - 1) * 100:+.1f}% vs the measured {measured.steps} steps")
    extra = f" ({', '.join(tail)})" if tail else ""
    return (f"Run {what}: predicted {best.tok_s:.1f} tok/s at accept length {best.accept_len:.2f} "
            f"(incl. bonus){extra}.")
