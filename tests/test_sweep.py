"""sweep: matrix expansion, launch configs, a full run, failures, resume, analysis and plots.

No GPU here, so the servers come from a FAKE factory injected into ``sweep.run_sweep`` (or patched
over ``sweep.default_factory`` for the CLI). Each fake "server" is the real stand-in HTTP server
(tests/standin_openai.py) on a clock derived from the config (baseline 8 ms/token; EAGLE-3 cycle
10 + 1 x steps ms, tokens per chunk = round(accept length)), and it writes the probes' JSONL
through the real ``probes.window.build_record`` with phases draft = steps x 1 ms, verify 8.5,
re-extend 1.0, other 0.5 ms: the cost-model fit must recover c0 = 10, cd = 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.measure.analysis import accept_len_from_rates
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.probes.window import build_record
from sglang_eagle3_ext.serve import server
from sglang_eagle3_ext.tune import sweep

RATES = [0.8, 0.6, 0.4, 0.3, 0.2]
LAYERS = REPO / "tests" / "data" / "layers"  # model configs without weights: the paths check passes
SWEEP_YAML = f"""
name: fake
launch:
  model: {LAYERS / "llama31_8b_target"}
  draft: {LAYERS / "draft_2_30_58"}
  tp: 8
matrix:
  steps: [1, 2, 3, 5]
  topk: [1]
  nccl: [tuned]
baseline: true
profile: true
bench: {{runs: 1, warmup: 0, max_tokens: 21, prompt: "hello"}}
"""


def _hist(k: int, n: int = 10000) -> dict[int, int]:
    """Accepted-draft counts whose conditional per-position rates are RATES[:k]."""
    hist, p = {}, 1.0
    for j in range(k + 1):
        stop = (1 - RATES[j]) if j < k else 1.0
        hist[j] = round(n * p * stop)
        if j < k:
            p *= RATES[j]
    return hist


class FakeServer:
    """Stand-in HTTP server with config-derived timing + probe JSONL (see module docstring)."""

    def __init__(self, cfg: server.LaunchConfig, fail: str | None = None) -> None:
        self.cfg = cfg
        self.fail = fail
        self.log_path = Path(cfg.log)
        self.standin: StandIn | None = None
        self.stopped = False

    @property
    def url(self) -> str:
        assert self.standin is not None
        return self.standin.url

    def start(self, wait: bool = True) -> FakeServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("loading weights\nCUDA out of memory while capturing graphs\n")
        if self.fail == "start":
            raise server.ServerFailed("server exited with code 1 before it was healthy",
                                      ["loading weights", "CUDA out of memory while capturing graphs"])
        if self.fail == "interrupt":
            raise KeyboardInterrupt
        k = self.cfg.steps
        if self.cfg.no_spec:
            self.standin = StandIn(ttft_s=0.005, interval_s=0.008)
        else:
            al = accept_len_from_rates(RATES, k)
            self.standin = StandIn(ttft_s=0.005, interval_s=(10 + k) / 1000,
                                   tokens_per_chunk=max(1, round(al)), spec="sglext")
            if self.cfg.profile_out:
                per = {"draft": [1.0 * k] * 50, "verify": [8.5] * 50, "extend": [1.0] * 50,
                       "other": [0.5] * 50, "cycle": [10.0 + k] * 50}
                rec = build_record(window=1, per_cycle=per, hist=_hist(k), mode="wall",
                                   spec={"steps": k, "topk": 1, "draft_tokens": k + 1},
                                   route="plugin", sglang_version="0.5.16", rank=0, tp_size=8)
                Path(self.cfg.profile_out).write_text(json.dumps(rec) + "\n")
        self.standin.start()
        return self

    def stop(self) -> None:
        self.stopped = True
        if self.standin:
            self.standin.stop()
            self.standin = None


class Factory:
    def __init__(self, fail: dict[int, str] | None = None) -> None:
        self.fail = fail or {}
        self.started: list[str] = []
        self.servers: list[FakeServer] = []

    def __call__(self, cfg: server.LaunchConfig, sglang_root: str | None) -> FakeServer:
        self.started.append(cfg.name)
        s = FakeServer(cfg, self.fail.get(cfg.steps or 0))
        self.servers.append(s)
        return s


@pytest.fixture()
def spec_file(tmp_path):
    p = tmp_path / "sweep.yaml"
    p.write_text(SWEEP_YAML)
    return p


def test_matrix_expansion_and_launch_configs(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("""
name: m
launch: {model: /m, draft: /d, extra_args: [--mem-fraction-static, "0.8"]}
matrix: {steps: [2, 4], topk: [1, 2], draft_tokens: [3, 6], nccl: [none, tuned],
         custom_all_reduce: [on, off]}
""")
    spec = sweep.load_spec(p)
    names = [c.name for c in spec.configs]
    # 4 (nccl x custom AR) families: a baseline, topk 1 (draft tokens forced to steps+1, deduped),
    # topk 2 with 3 and 6 draft tokens where steps*topk+1 >= draft tokens.
    fam = [n for n in names if n.endswith("nccl=tuned no-custom-ar")]
    assert fam == ["no-spec nccl=tuned no-custom-ar", "eagle3 s2 k1 d3 nccl=tuned no-custom-ar",
                   "eagle3 s2 k2 d3 nccl=tuned no-custom-ar", "eagle3 s4 k1 d5 nccl=tuned no-custom-ar",
                   "eagle3 s4 k2 d3 nccl=tuned no-custom-ar", "eagle3 s4 k2 d6 nccl=tuned no-custom-ar"]
    assert len(names) == 4 * 6 == len(set(names))
    assert [s["name"] for s in spec.skipped][:1] == ["eagle3 s2 k2 d6 no-nccl"]   # 2*2+1 < 6
    by = {c.name: c for c in spec.configs}
    cfg = sweep.launch_config(spec, by["eagle3 s4 k2 d6 nccl=tuned no-custom-ar"], tmp_path / "c")
    assert (cfg.model, cfg.draft, cfg.steps, cfg.topk, cfg.draft_tokens) == ("/m", "/d", 4, 2, 6)
    assert cfg.nccl == "tuned" and cfg.profile and cfg.profile_out == str(tmp_path / "c" / "prof.jsonl")
    assert cfg.extra_args == ["--mem-fraction-static", "0.8", "--disable-custom-all-reduce"]
    base = sweep.launch_config(spec, by["no-spec no-nccl"], tmp_path / "b")
    assert base.no_spec and base.steps is None and base.nccl == "none" and not base.profile
    assert base.extra_args == ["--mem-fraction-static", "0.8"]


@pytest.mark.parametrize("text, msg", [
    ("matrix: {steps: [2]}\nbogus: 1\n", "unknown key"),
    ("matrix: {steps: [-1]}\n", "positive integers"),
    ("matrix: {steps: [2]}\nconcurrency: [1, 1]\n", "distinct"),
    ("matrix: {steps: [2]}\nconcurrency: [1, 8]\nbench: {concurrency: 2}\n", "given twice"),
    ("matrix: {steps: [2], topk: [4]}\n", "'auto' only means"),
    ("launch: {steps: 3}\nmatrix: {steps: [2]}\n", "set by the sweep"),
    ("matrix: {steps: [2], custom_all_reduce: [maybe]}\n", "on/off"),
    ("matrix: [1, 2]\n", "matrix keys"),
    ("- 1\n", "a sweep file is a mapping"),
])
def test_bad_sweep_files(tmp_path, text, msg):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(UserError, match=msg) as ei:
        sweep.load_spec(p)
    assert ei.value.exit_code == 2


def test_full_sweep_results_analysis_and_plots(spec_file, tmp_path, monkeypatch, capsys):
    fac = Factory()
    monkeypatch.setattr(sweep, "default_factory", fac)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(spec_file), "--out", str(out)]) == 0
    assert all(s.stopped for s in fac.servers) and len(fac.started) == 5
    doc = json.loads((out / "results.json").read_text())
    assert [c["status"] for c in doc["configs"]] == ["ok"] * 5
    assert doc["configs"][0]["baseline"] and doc["configs"][0]["name"] == "no-spec nccl=tuned"
    s2 = doc["configs"][2]
    assert s2["bench"]["summary"]["accept_source"] == "sglext"
    assert s2["profile"]["phases"]["cycle"]["mean_ms"] == pytest.approx(12.0)
    assert (out / "configs" / s2["slug"] / "bench.json").exists()
    a = doc["analysis"]
    assert a["cost_model"]["c0"] == pytest.approx(10.0) and a["cost_model"]["cd"] == pytest.approx(1.0)
    # baseline 8 ms/token -> 125 tok/s; break-even at 2 steps = 12 ms x 125 / 1000 = 1.5
    be = {r["steps"]: r for r in a["break_even"]}
    assert be[2]["break_even"] == pytest.approx(12.0 * be[2]["baseline_tok_s"] / 1000)
    assert be[2]["baseline_tok_s"] == pytest.approx(125, rel=0.05)
    assert be[2]["beats"] is True
    # best k by the model: argmax AL(k)/(10+k) for RATES -> 3 steps
    exp = max(range(1, 6), key=lambda k: accept_len_from_rates(RATES, k) / (10 + k))
    assert a["best_k"] == exp
    pred = a["predicted"]
    assert pred["from"] == "eagle3 s5 k1 d6 nccl=tuned"
    rows = {r["steps"]: r for r in pred["rows"]}
    assert set(rows) == {0, 1, 2, 3, 4, 5} and rows[5]["kind"] == "measured"
    assert rows[2]["pred_accept_length"] == pytest.approx(accept_len_from_rates(RATES, 2), rel=0.01)
    assert rows[2]["meas_tok_s"] == doc["configs"][2]["bench"]["summary"]["decode_tok_s"]["avg"]
    text = capsys.readouterr().out
    assert "Cost model" in text and "Recommendation:" in text and "Break-even" in text
    assert "negative cost per step" not in text and "warning" not in a["cost_model"]  # cd = +1 here
    assert "| eagle3 s3 k1 d4 nccl=tuned |" in (out / "table.md").read_text()
    for png in ("tok_s.png", "phases.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failing_config_is_recorded_and_the_sweep_goes_on(spec_file, tmp_path, monkeypatch, capsys):
    fac = Factory(fail={2: "start"})
    monkeypatch.setattr(sweep, "default_factory", fac)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(spec_file), "--out", str(out), "--no-plots"]) == 1
    doc = json.loads((out / "results.json").read_text())
    st = {c["steps"]: c for c in doc["configs"]}
    assert st[2]["status"] == "failed" and "exited with code 1" in st[2]["error"]
    assert st[2]["log_tail"][-1] == "CUDA out of memory while capturing graphs"
    assert [st[k]["status"] for k in (None, 1, 3, 5)] == ["ok"] * 4
    assert len(fac.started) == 5 and all(s.stopped for s in fac.servers)
    assert "CUDA out of memory" in capsys.readouterr().out


def test_invalid_launch_config_fails_only_that_config(tmp_path):
    """A factory that validates (like the default) raising UserError marks one config failed."""
    p = tmp_path / "s.yaml"
    p.write_text(SWEEP_YAML)
    spec = sweep.load_spec(p)

    def factory(cfg, root):
        if cfg.steps == 3:
            raise UserError("--speculative-num-steps 3 is not allowed here", exit_code=2)
        return FakeServer(cfg)

    doc = sweep.run_sweep(spec, tmp_path / "o", factory=factory, log=lambda m: None)
    assert [c["status"] for c in doc["configs"]] == ["ok", "ok", "ok", "failed", "ok"]
    assert "not allowed" in doc["configs"][3]["error"]


def test_resume_after_interrupted_run(spec_file, tmp_path):
    spec = sweep.load_spec(spec_file)
    out = tmp_path / "out"
    first = Factory(fail={3: "interrupt"})
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(spec, out, factory=first, log=lambda m: None)
    doc = json.loads((out / "results.json").read_text())
    assert [c["status"] for c in doc["configs"]] == ["ok", "ok", "ok", "interrupted"]
    assert all(s.stopped for s in first.servers)
    with pytest.raises(UserError, match="--resume"):
        sweep.run_sweep(spec, out, factory=Factory(), log=lambda m: None)
    again = Factory()
    logs: list[str] = []
    doc = sweep.run_sweep(spec, out, resume=True, factory=again, log=logs.append)
    assert [n.split("-", 1)[1] for n in again.started] == ["eagle3-s3-k1-d4-nccl-tuned",
                                                          "eagle3-s5-k1-d6-nccl-tuned"]
    assert [c["status"] for c in doc["configs"]] == ["ok"] * 5
    assert sum("skipped (--resume)" in m for m in logs) == 3
    assert json.loads((out / "results.json").read_text())["configs"][0]["bench"]


def test_plan_starts_nothing(spec_file, monkeypatch, capsys, tmp_path):
    fac = Factory()
    monkeypatch.setattr(sweep, "default_factory", fac)
    assert cli.main(["sweep", str(spec_file), "--plan", "--out", str(tmp_path / "o")]) == 0
    assert fac.started == [] and "eagle3 s5 k1 d6 nccl=tuned" in capsys.readouterr().out


def test_missing_model_paths_are_one_line_before_any_server(monkeypatch, capsys, tmp_path):
    """The Kimi example without KIMI_K25_PATH / KIMI_K25_EAGLE3_PATH: each of the 10 configs used
    to start, fail on the same missing folder (20 identical lines) and still write a results file.
    Now: one line naming the variable, exit 2, no server, no output folder."""
    fac = Factory()
    monkeypatch.setattr(sweep, "default_factory", fac)
    for var in ("KIMI_K25_PATH", "KIMI_K25_EAGLE3_PATH"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "o"
    rc = cli.main(["sweep", str(REPO / "examples" / "sweep-kimi.yaml"), "--out", str(out)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "none of its 10 configs can start, nothing started" in lines[0]
    assert "KIMI_K25_PATH is not set" in lines[0] and lines[0].count("no such folder") == 1
    assert fac.started == [] and not out.exists()
    # the target found, the draft not: only the speculative configs are named
    monkeypatch.setenv("KIMI_K25_PATH", str(LAYERS / "kimi_k25_target"))
    rc = cli.main(["sweep", str(REPO / "examples" / "sweep-kimi.yaml"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "8 of its 10 configs cannot start" in err and "KIMI_K25_EAGLE3_PATH" in err, err
    assert "[every speculative config]" in err and fac.started == [] and not out.exists()


def test_a_folder_without_config_is_named_with_its_configs(tmp_path):
    """Different problems are each said once, with the configs they stop."""
    (tmp_path / "empty").mkdir()
    p = tmp_path / "s.yaml"
    p.write_text(f"name: m\nlaunch: {{model: {LAYERS / 'llama31_8b_target'}, draft: {tmp_path / 'empty'}}}\n"
                 "matrix: {steps: [1, 2]}\nbaseline: true\n")
    with pytest.raises(UserError) as ei:
        sweep.check_paths(sweep.load_spec(p))
    msg = str(ei.value)
    assert ei.value.exit_code == 2 and "2 of its 3 configs cannot start" in msg
    assert "no config.json inside" in msg and msg.count("no config.json") == 1


def test_examples_parse():
    root = Path(__file__).resolve().parent.parent / "examples"
    files = sorted(root.glob("sweep-*.yaml"))
    assert {f.name for f in files} >= {"sweep-tiny.yaml", "sweep-kimi.yaml"}
    for f in files:
        spec = sweep.load_spec(f)
        assert spec.configs
        for c in spec.configs:
            sweep.launch_config(spec, c, Path("/tmp/x"))


def test_report_rereads_the_real_h200_sweep(tmp_path):
    """`sweep --report` on the committed H200 run (docs/data): no server, same table, analysis; the
    folder it reads is left byte-identical; --out gets results.json, table.md and plots."""
    import hashlib
    import re

    d = REPO / "docs" / "data" / "h200-2026-11-29" / "run2" / "core"

    def snapshot() -> dict:
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}

    before = snapshot()
    env = {**os.environ, "COLUMNS": "120"}
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "sweep", "--report", str(d)],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert snapshot() == before and "nothing written" in r.stdout
    assert "847.8" in r.stdout and "839.3" in r.stdout           # bench tok/s, untouched
    assert "No step count beats the no-spec baseline" in r.stdout
    assert "Predicted best k (cost model + measured acceptance): 4" in r.stdout
    assert "cycle_ms = 3.27 - 0.06 x steps" in r.stdout          # no "+ -0.06"
    # ... and it says what a negative cost per step means, with the cycles that made it
    assert "a negative cost per step is a fit the data does not support" in r.stdout
    assert "(steps: ms = 1: 3.24, 2: 3.13, 3: 3.01, 4: 3.06)" in r.stdout
    # every tok/s the recommendation quotes is printed in a table above it
    rec = r.stdout.split("Recommendation:", 1)[1]
    table = r.stdout.split("Recommendation:", 1)[0]
    for v in re.findall(r"(\d+\.\d) tok/s", rec):
        assert v in table, v
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "sweep", "--report", str(d), "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert snapshot() == before
    assert (out / "phases.png").stat().st_size > 0 and (out / "table.md").exists()
    doc = json.loads((out / "results.json").read_text())
    s4 = next(c for c in doc["configs"] if c["steps"] == 4)
    assert s4["profile"]["windows"] == 18 and any("window 1" in n for n in s4["profile"]["notes"])
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "sweep", "--report", str(d), "--out", str(d)],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 2 and "is the folder --report reads" in r.stderr and snapshot() == before


def test_report_needs_a_sweep_folder(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "sweep", "--report", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no results.json" in r.stderr
