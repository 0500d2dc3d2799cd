"""sweep over steps x concurrency: ladders per config, per-batch probe figures, the tier verdict,
and `adaptive write` from the result.

No GPU, so servers come from a FAKE factory (as in test_sweep.py): each is the real stand-in HTTP
server whose chunk interval grows with the streams in flight (``load_s`` per other stream), so
per-stream tok/s falls with concurrency and speculation stops paying at a known level:

    no-spec:  1 token per (8 + 0.5 x (n-1)) ms
    k steps:  2 tokens per (10 + k + 1.0 x (k+1) x (n-1)) ms

Probe records are constructed here in the eagle3_prof/2 shape of RECORDS.md (``by_batch`` per
batch size; the producer's records are another helper's work): verify = 8.5 + 0.25 x b x (k+1),
draft = 1.0 ms per step, extend 1.0, other 0.5, so the cost-model fit must recover 8.5 and 0.25.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.serve import server
from sglang_eagle3_ext.tune import sweep, tiers

LEVELS = (1, 4, 8)
LAYERS = Path(__file__).resolve().parent / "data" / "layers"  # model configs (no weights): the paths check passes
YAML = f"""
name: load
launch: {{model: {LAYERS / "llama31_8b_target"}, draft: {LAYERS / "draft_2_30_58"}}}
matrix: {{steps: [0, 1, 3]}}
concurrency: [1, 4, 8]
profile: true
bench: {{runs: 1, warmup: 0, max_tokens: 41, prompt: hi}}
"""


def _phase(ms: float) -> dict:
    return {"mean_ms": ms, "p50_ms": ms, "p90_ms": ms}


def batch_entry(b: int, k: int, cycles: int = 100) -> dict:
    verify = 8.5 + 0.25 * b * (k + 1)
    cyc = k * 1.0 + verify + 1.0 + 0.5
    al = 2.0
    return {"cycles": cycles, "requests": cycles * b, "tokens": int(cycles * b * al), "accept_len": al,
            "phases": {"draft": _phase(k * 1.0), "verify": _phase(verify), "extend": _phase(1.0),
                       "other": _phase(0.5), "cycle": _phase(cyc)},
            "per_stream_tok_s": al * 1000 / cyc, "throughput_tok_s": b * al * 1000 / cyc}


class LoadServer:
    def __init__(self, cfg: server.LaunchConfig) -> None:
        self.cfg = cfg
        self.log_path = Path(cfg.log)
        self.standin: StandIn | None = None

    @property
    def url(self) -> str:
        return self.standin.url

    def start(self, wait: bool = True):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("ready\n")
        k = self.cfg.steps
        if self.cfg.no_spec:
            self.standin = StandIn(ttft_s=0.003, interval_s=0.008, load_s=0.0005)
        else:
            self.standin = StandIn(ttft_s=0.003, interval_s=(10 + k) / 1000, tokens_per_chunk=2,
                                   spec="sglext", load_s=0.002 * (k + 1))  # wide margins: robust on a busy CPU
            rec = {"schema": "eagle3_prof/2", "window": 2, "spec": {"steps": k, "topk": 1},
                   "per_position": [1.0] + [0.0] * (k - 1),   # accept length 2, like the stand-in
                   "by_batch": {str(b): batch_entry(b, k) for b in LEVELS}}
            Path(self.cfg.profile_out).write_text(json.dumps(rec) + "\n")
        self.standin.start()
        return self

    def stop(self) -> None:
        if self.standin:
            self.standin.stop()
            self.standin = None


def test_spec_parses_concurrency_and_steps_zero(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(YAML)
    spec = sweep.load_spec(p)
    assert spec.concurrency == [1, 4, 8]
    assert [c.name for c in spec.configs] == ["no-spec no-nccl", "eagle3 s1 k1 d2 no-nccl",
                                              "eagle3 s3 k1 d4 no-nccl"]
    p.write_text(YAML.replace("concurrency: [1, 4, 8]\n", ""))
    assert sweep.load_spec(p).concurrency == [1]          # single-concurrency sweeps unchanged


def test_ladder_sweep_tiers_and_adaptive(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(YAML)
    monkeypatch.setattr(sweep, "default_factory", lambda cfg, root: LoadServer(cfg))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(spec), "--out", str(out), "--no-plots"]) == 0
    doc = json.loads((out / "results.json").read_text())
    for c in doc["configs"]:
        assert c["status"] == "ok" and [lv["concurrency"] for lv in c["ladder"]["levels"]] == [1, 4, 8]
        assert (out / "configs" / c["slug"] / "ladder.json").exists()
        assert c["bench"]["params"]["concurrency"] == 1   # first level kept for single-level readers
    t = doc["analysis"]["tiers"]
    meas = {(r["steps"], r["batch_size"]): r["per_stream_tok_s"] for r in t["measured"]}
    # the stand-in's clock: per-stream falls with load, faster for more steps
    assert meas[(0, 1)] == pytest.approx(125, rel=0.15)
    assert meas[(1, 1)] == pytest.approx(2000 / 11, rel=0.15)
    assert meas[(1, 8)] < meas[(1, 1)] / 1.5
    rec = {r["batch_size"]: r for r in t["recommendation"]}
    assert rec[1]["best_steps"] == 1 and rec[1]["speculation_pays"]
    assert rec[8]["best_steps"] == 0 and rec[8]["speculation_pays"] is False
    assert t["stops_paying_at"] in (4, 8)
    # cost model over tokens in flight from the probes' per-batch figures
    vf = t["cost_model"]["verify_fit"]
    assert vf["a"] == pytest.approx(8.5) and vf["b"] == pytest.approx(0.25)
    pred = {(r["steps"], r["batch_size"]): r for r in t["predicted"]}
    # k=2 was never run: predicted from the 3-step run's per-position acceptance (AL 1 + 1 + 0)
    p2 = pred[(2, 4)]
    assert p2["accept_length"] == pytest.approx(2.0) and "3-step run" in p2["how"]
    assert p2["cycle_ms"] == pytest.approx(2 * 1.0 + 8.5 + 0.25 * 4 * 3 + 1.5)
    text = capsys.readouterr().out
    assert "Per tier:" in text and "stops paying" in text

    # adaptive write from this sweep: tier 8 holds no-spec (0.5.23 allows 0)
    a = tmp_path / "adaptive.json"
    assert cli.main(["adaptive", "write", "--from", str(out), "--out", str(a), "--json"]) == 0
    cfg = json.loads(a.read_text())
    assert cfg["1"]["candidate_steps"] == [1] and cfg["8"]["candidate_steps"] == [0]
    # with --predicted, the never-measured 2 steps competes too (probe + cost model at tier 8:
    # 2 x 1000 / (2 + 8.5 + 0.25 x 8 x 3 + 1.5) = 111 tok/s > measured no-spec)
    assert cli.main(["adaptive", "write", "--from", str(out), "--out", str(a), "--predicted"]) == 0
    assert 2 in json.loads(a.read_text())["8"]["candidate_steps"]

    capsys.readouterr()
    # compare reads the sweep's ladders per level, the no-spec config as baseline
    assert cli.main(["compare", str(out / "results.json"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["concurrency"] for r in rows} == {1, 4, 8}
    assert [r["config"] for r in rows if r["is_baseline"]] == ["no-spec no-nccl"] * 3

    # --report re-reads the folder and gives the same verdict
    assert cli.main(["sweep", "--report", str(out), "--no-plots"]) == 0
    again = json.loads((out / "results.json").read_text())["analysis"]["tiers"]
    assert again["recommendation"] == t["recommendation"]


def test_by_batch_weights_windows_by_cycles():
    w1 = {"by_batch": {"4": batch_entry(4, 3, cycles=100)}}
    w2 = {"by_batch": {"4": dict(batch_entry(4, 3, cycles=300),
                                 phases={"cycle": _phase(20.0), "verify": _phase(14.0)})}}
    bb = tiers.by_batch([w1, w2])[4]
    c1 = batch_entry(4, 3)["phases"]["cycle"]["mean_ms"]
    assert bb["cycles"] == 400 and bb["requests"] == 1600
    assert bb["phases"]["cycle"]["mean_ms"] == pytest.approx((c1 * 100 + 20.0 * 300) / 400)
    assert bb["phases"]["cycle"]["p50_ms"] == 20.0            # cycle-weighted median of window p50s
    assert bb["accept_len"] == pytest.approx(2.0)
    # v1 records (no by_batch) give nothing per batch
    assert tiers.by_batch([{"schema": "eagle3_prof/1"}]) == {}
