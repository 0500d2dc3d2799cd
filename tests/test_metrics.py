"""Phase metrics (probes/metrics.py) read back the way SGLang's /metrics reads them.

In process: real prometheus_client in multiprocess mode (PROMETHEUS_MULTIPROC_DIR = a temp dir),
read back through a real ``CollectorRegistry`` + ``MultiProcessCollector`` and prometheus_client's
text parser, exactly SGLang's ``add_prometheus_middleware`` route. What is faked: the window
records are written here (or produced by the probes on a scripted clock), because no speculative
decode cycle runs without a GPU.

Real server (slow): SGLang 0.5.23 on CPU with ``--enable-metrics`` and our plugin
(EAGLE3_PROFILE=1, EAGLE3_PROFILE_METRICS=1) serves our families on its own /metrics, with zero
samples (no EAGLE-3 cycle runs on CPU), labelled with the served model name and tp_rank.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request

import pytest
from conftest import REPO, requires_sglang

from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.probes import metrics, timers

prom = pytest.importorskip("prometheus_client", reason="prometheus_client not installed (tools/ci_env.sh installs it)")
from prometheus_client import CollectorRegistry, generate_latest, multiprocess, values  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

FAMILIES = ("phase_seconds", "boundary_cycle_extra_seconds", "boundary_extra_seconds", "cycles", "tokens", "cycle_seconds",
            "boundary_reasons", "accept_length", "tokens_per_cycle", "stream_tokens_per_second",
            "gen_throughput", "break_even_accept_length", "break_even_margin", "speedup_vs_baseline",
            "baseline_tokens_per_second", "probe_info")


def phases(draft: float, verify: float, extend: float, other: float) -> dict:
    cyc = draft + verify + extend + other
    return {p: {"mean_ms": v, "p50_ms": v, "p90_ms": v}
            for p, v in (("draft", draft), ("verify", verify), ("extend", extend), ("other", other),
                         ("cycle", cyc))}


def v2_record() -> dict:
    """A v2 window (RECORDS.md): 100 cycles, 90 steady (60 at bs 1, 20 at bs 3, 10 at bs 4), 10 boundary."""
    return {
        "schema": "eagle3_prof/2", "window": 1, "cycles": 100, "requests": 170, "tokens": 400,
        "accepted_drafts": 230, "accept_len": 2.3529, "phases": phases(2.0, 28.0, 1.0, 1.0),
        "mode": "events", "route": "plugin", "sglang_version": "0.5.23",
        "spec": {"steps": 3, "topk": 1, "draft_tokens": 4}, "rank": 0, "tp_size": 1,
        "steady": {"cycles": 90, "requests": 160, "accepted_drafts": 220, "tokens": 380,
                   "accept_len": 2.375, "phases": phases(2.0, 26.0, 1.0, 1.0), "eff_tok_s": 79.17},
        "boundary": {"cycles": 10, "reasons": {"join": 4, "leave": 3, "extend": 5, "batch_change": 0, "idle": 1},
                     "phases": phases(2.0, 40.0, 1.0, 7.0), "extra_ms": 200.0},
        "by_batch": {
            "1": {"cycles": 60, "requests": 60, "tokens": 150, "accept_len": 2.5, "phases": phases(2.0, 25.0, 1.0, 2.0)},
            "3": {"cycles": 20, "requests": 60, "tokens": 135, "accept_len": 2.25, "phases": phases(2.0, 28.0, 1.0, 1.0)},
            "4": {"cycles": 10, "requests": 40, "tokens": 95, "accept_len": 2.375, "phases": phases(2.0, 31.0, 1.0, 2.0)},
        },
    }


@pytest.fixture()
def multiproc(tmp_path, monkeypatch):
    """prometheus_client in multiprocess mode on a fresh dir, as in an SGLang --enable-metrics process."""
    d = tmp_path / "prom"
    d.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(d))
    # the value class is chosen when prometheus_client is first imported; this process may have
    # imported it before the variable was set, so choose again the way that import does
    monkeypatch.setattr(values, "ValueClass", values.get_value_class())
    yield d
    metrics.reset(environ={})


def scrape() -> dict:
    """Our families, as SGLang's /metrics would serve them: {family: [(labels, value, sample name)]}."""
    reg = CollectorRegistry()
    multiprocess.MultiProcessCollector(reg)
    text = generate_latest(reg).decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("sglang:eagle3_"):
            out[fam.name[len("sglang:eagle3_"):]] = [(s.labels, s.value, s.name) for s in fam.samples]
    return out


def value(fams: dict, family: str, sample: str | None = None, **labels: str) -> float:
    hits = [v for lab, v, name in fams[family]
            if (sample is None or name.endswith(sample)) and all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, (family, sample, labels, fams[family])
    return hits[0]


LABELS = {"model_name": "tiny-target", "tp_rank": "1", "pp_rank": "0"}


def test_families_exist_from_registration_with_zero_samples(multiproc):
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1"})
    assert metrics.register_families(LABELS)
    fams = scrape()
    assert set(FAMILIES) <= set(fams) | {"boundary_reasons", "probe_info"}  # no child yet: no reason/info seen
    assert value(fams, "phase_seconds", "_count", phase="verify", cycles="steady", batch_size="all", **LABELS) == 0
    assert value(fams, "cycles", "_total", cycles="steady", **LABELS) == 0
    assert math.isnan(value(fams, "accept_length", cycles="steady", batch_size="all", **LABELS))
    assert math.isnan(value(fams, "break_even_margin", **LABELS))


def test_v2_record_values_flow_to_the_collector(multiproc):
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1",
                           "EAGLE3_PROFILE_BASELINE_TPS": "88.8"})
    metrics.register_families(LABELS)
    metrics.publish(v2_record())
    f = scrape()
    L = LABELS
    # phase histogram: one observation per window = the window mean, in seconds
    assert value(f, "phase_seconds", "_sum", phase="verify", cycles="steady", batch_size="all", **L) == pytest.approx(0.026)
    assert value(f, "phase_seconds", "_count", phase="verify", cycles="steady", batch_size="all", **L) == 1
    assert value(f, "phase_seconds", "_sum", phase="cycle", cycles="all", batch_size="all", **L) == pytest.approx(0.032)
    assert value(f, "phase_seconds", "_sum", phase="other", cycles="boundary", batch_size="all", **L) == pytest.approx(0.007)
    assert value(f, "phase_seconds", "_bucket", phase="verify", cycles="steady", batch_size="all", le="0.025", **L) == 0
    assert value(f, "phase_seconds", "_bucket", phase="verify", cycles="steady", batch_size="all", le="0.03", **L) == 1
    # batch sizes 3 and 4 share the bucket "3-4": cycle-weighted verify (28*20 + 31*10) / 30 = 29 ms
    assert value(f, "phase_seconds", "_sum", phase="verify", cycles="steady", batch_size="3-4", **L) == pytest.approx(0.029)
    assert value(f, "accept_length", cycles="steady", batch_size="3-4", **L) == pytest.approx(230 / 100)
    assert value(f, "tokens_per_cycle", cycles="steady", batch_size="3-4", **L) == pytest.approx(230 / 30)
    assert value(f, "accept_length", cycles="steady", batch_size="1", **L) == pytest.approx(2.5)
    # counters: cycles, tokens, time in cycles
    assert value(f, "cycles", "_total", cycles="steady", **L) == 90
    assert value(f, "cycles", "_total", cycles="boundary", **L) == 10
    assert value(f, "cycles", "_total", cycles="all", **L) == 100
    assert value(f, "tokens", "_total", cycles="steady", **L) == 380
    assert value(f, "cycle_seconds", "_total", cycles="steady", **L) == pytest.approx(90 * 0.030)
    assert value(f, "boundary_extra_seconds", "_total", **L) == pytest.approx(0.2)
    assert value(f, "boundary_cycle_extra_seconds", "_sum", **L) == pytest.approx(0.02)  # per boundary cycle
    assert value(f, "boundary_reasons", "_total", reason="join", **L) == 4
    # gauges: steady accept length (incl. bonus), rates, break-even against 88.8 tok/s
    assert value(f, "accept_length", cycles="steady", batch_size="all", **L) == pytest.approx(380 / 160)
    assert value(f, "stream_tokens_per_second", cycles="steady", batch_size="all", **L) == pytest.approx(380 / 160 * 1000 / 30)
    assert value(f, "gen_throughput", cycles="steady", batch_size="all", **L) == pytest.approx(380 * 1000 / (90 * 30))
    needed = 30 * 88.8 / 1000
    assert value(f, "break_even_accept_length", **L) == pytest.approx(needed)
    assert value(f, "break_even_margin", **L) == pytest.approx(380 / 160 - needed)
    assert value(f, "speedup_vs_baseline", **L) == pytest.approx(380 / 160 * 1000 / 30 / 88.8)
    assert value(f, "baseline_tokens_per_second", **L) == 88.8
    assert value(f, "probe_info", mode="events", route="plugin", steps="3", schema="eagle3_prof/2", **L) == 1  # the record given (v2_record)
    # a second window adds to the counters and replaces the gauges
    metrics.publish(v2_record())
    f = scrape()
    assert value(f, "cycles", "_total", cycles="steady", **L) == 180
    assert value(f, "phase_seconds", "_count", phase="verify", cycles="steady", batch_size="all", **L) == 2


def test_v1_record_publishes_all_cycles_and_margin_from_them(multiproc):
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1",
                           "EAGLE3_PROFILE_BASELINE_TPS": "50"})
    rec = {k: v for k, v in v2_record().items() if k not in ("steady", "boundary", "by_batch")}
    rec["schema"] = "eagle3_prof/1"
    metrics.publish(rec)  # no register_families first: the first window creates the families
    f = scrape()
    lab = {"tp_rank": "0"}  # outside a scheduler: tp_rank from the record, model name unknown
    assert value(f, "cycles", "_total", cycles="all", **lab) == 100
    assert value(f, "cycles", "_total", cycles="steady", **lab) == 0  # no split in v1
    assert value(f, "accept_length", cycles="all", batch_size="all", **lab) == pytest.approx(400 / 170)
    assert value(f, "break_even_margin", **lab) == pytest.approx(400 / 170 - 32 * 50 / 1000)


def test_probes_window_close_publishes(multiproc):
    """The profiler's write path calls publish(): a window of 10 scripted-clock cycles."""
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1"})
    t = [100.0]
    probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "10"},
                 backend=timers.FakeEventTimer(lambda: t[0]))
    try:
        for _ in range(10):
            probes.cycle_begin()
            probes.phase_begin("verify")
            t[0] += 0.020
            probes.phase_end("verify")
            probes.record_accept([1], bonus_included=False)
            probes.cycle_end()
        probes.cycle_begin()
        f = scrape()
        assert sum(v for lab, v, n in f["cycles"] if lab["cycles"] == "all" and n.endswith("_total")) == 10
        assert sum(v for lab, v, n in f["accept_length"] if lab["cycles"] == "all") == pytest.approx(2.0)
    finally:
        probes.reset(environ={})


def test_no_multiproc_dir_warns_once_and_never_raises(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1"})
    try:
        assert not metrics.register_families()
        metrics.publish(v2_record())
        metrics.publish(v2_record())
        err = capsys.readouterr().err
        assert err.count("PROMETHEUS_MULTIPROC_DIR is not set") == 1 and "--enable-metrics" in err
    finally:
        metrics.reset(environ={})


def test_bad_record_and_bad_baseline_warn_never_raise(multiproc, capsys):
    metrics.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1",
                           "EAGLE3_PROFILE_BASELINE_TPS": "fast"})
    assert "EAGLE3_PROFILE_BASELINE_TPS='fast' is not a positive number" in capsys.readouterr().err
    metrics.publish({"cycles": "many"})
    metrics.publish({"cycles": 5, "phases": {"cycle": {"mean_ms": "x"}}})
    assert "phase metrics not published" in capsys.readouterr().err


def test_batch_bucket_labels():
    assert [metrics.batch_bucket(b) for b in (1, 2, 3, 4, 5, 8, 9, 16, 17, 200)] == \
        ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "9-16", "17-32", "129-256"]


def test_off_costs_nothing_and_never_imports_prometheus_client():
    code = ("import sys\n"
            "from sglang_eagle3_ext.runtime.probes import metrics\n"
            "metrics.publish({'cycles': 10}); metrics.register_families()\n"
            "print('prometheus_client' in sys.modules, metrics.enabled())\n")
    for env_extra in ({}, {"EAGLE3_PROFILE_METRICS": "1"}, {"EAGLE3_PROFILE": "1"}):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_PROFILE")}
        env.update(env_extra, PYTHONPATH=str(REPO))
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.split() == ["False", "False"], (env_extra, p.stdout, p.stderr)


# ------------------------------------------------------------------ one real SGLang server on CPU

@pytest.mark.slow
@pytest.mark.sglang
@requires_sglang
def test_real_sglang_server_serves_our_families_on_its_metrics(tmp_path):
    """SGLang 0.5.23 on CPU, `--enable-metrics`, our plugin with EAGLE3_PROFILE_METRICS=1: its own
    /metrics (SGLang's MultiProcessCollector route, nothing of ours) lists our families next to
    SGLang's, labelled with the served model name and tp_rank, zero samples (no speculative cycle
    runs on CPU: the non-speculative server stands in; the values path is proven in process above)."""
    from test_server import detached_cpu_server

    with detached_cpu_server(tmp_path, {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "1",
                                        "EAGLE3_PROFILE_BASELINE_TPS": "88.8"},
                             ["--enable-metrics", "--served-model-name", "tiny-served"]) as (port, _log, _info, _env):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        ours = {n[len("sglang:eagle3_"):]: f for n, f in fams.items() if n.startswith("sglang:eagle3_")}
        assert set(FAMILIES) - {"boundary_reasons", "probe_info"} <= set(ours), sorted(ours)
        assert any(n.startswith("sglang:") and not n.startswith("sglang:eagle3_") for n in fams)  # SGLang's own
        verify = [s for s in ours["phase_seconds"].samples
                  if s.name.endswith("_count") and s.labels.get("phase") == "verify"
                  and s.labels.get("cycles") == "steady"]
        assert len(verify) == 1 and verify[0].value == 0
        assert verify[0].labels["model_name"] == "tiny-served" and verify[0].labels["tp_rank"] == "0"
        base = [s for s in ours["baseline_tokens_per_second"].samples]
        assert [s.value for s in base] == [88.8]


def test_grafana_dashboard_uses_only_published_names():
    """Every series the dashboard queries is one we publish or one SGLang 0.5.23 really exports
    (read from its metrics_collector.py source)."""
    import re

    from sglang_eagle3_ext.serve import releases

    dash = json.loads((REPO / "docs" / "grafana" / "eagle3-phases.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = set(re.findall(r"sglang:[a-z0-9_]+", " ".join(exprs)))
    ours = {n for n in names if n.startswith("sglang:eagle3_")}
    theirs = names - ours
    suffix = re.compile(r"_(sum|count|bucket|total)$")
    for n in ours:
        base = n[len("sglang:eagle3_"):]
        assert base in FAMILIES or suffix.sub("", base) in FAMILIES, n
    assert {"sglang:spec_accept_length", "sglang:gen_throughput"} <= theirs
    src = (releases.fetch("0.5.23") / "sglang" / "srt" / "observability" / "metrics_collector.py").read_text()
    for n in theirs:
        assert f'name="{n}"' in src, n
    assert (REPO / "docs" / "guide" / "metrics.md").read_text().count("sglang:eagle3_") >= len(FAMILIES)


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.13", "0.5.16", "0.5.19", "0.5.23"])
def test_scheduler_labels_read_real_run_scheduler_process_arguments(version):
    """scheduler_labels() reads server_args / tp_rank / pp_rank of run_scheduler_process: those
    parameter names exist in every pinned release with plugins, and ServerArgs has served_model_name
    (the real 0.5.23 server test reads it back as the model_name label)."""
    import ast

    from sglang_eagle3_ext.serve import releases

    root = releases.fetch(version) / "sglang" / "srt"
    tree = ast.parse((root / "managers" / "scheduler.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_scheduler_process")
    params = [a.arg for a in fn.args.args]
    assert {"server_args", "tp_rank", "pp_rank"} <= set(params)
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "load_plugins"]
    assert calls  # the plugin (and so register_families) runs inside this frame
    # ServerArgs.served_model_name: in server_args.py, or (0.5.23) in one of its argument groups
    files = [root / "server_args.py", *sorted((root / "arg_groups").glob("*.py"))]
    assert any("served_model_name" in f.read_text() for f in files if f.is_file())


def test_scheduler_labels_from_the_calling_frame():
    class SA:
        served_model_name = "served"

    def run_scheduler_process(server_args, tp_rank, pp_rank):  # the name is what is looked up
        return metrics.scheduler_labels()

    assert run_scheduler_process(SA(), 3, 1) == {"model_name": "served", "tp_rank": 3, "pp_rank": 1}
