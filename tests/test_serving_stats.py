"""Open-loop figures (measure/serving_stats.py): percentiles, ITL / TPOT, goodput, against hand
computed values, numpy, and SGLang bench_serving's own calculate_metrics / calculate_goodput
(taken from the pinned 0.5.16 / 0.5.23 sources, tests/bench_serving_src.py) on the same requests."""

from __future__ import annotations

import random

import bench_serving_src
import pytest

from sglang_eagle3_ext.measure import open_loop, serving_stats
from sglang_eagle3_ext.measure.prompts import PromptItem
from sglang_eagle3_ext.runtime.errors import UserError

np = pytest.importorskip("numpy")


def test_percentiles_by_hand():
    st = serving_stats.dist_stats([0.001, 0.002, 0.003, 0.004, 0.010])  # seconds -> ms
    # linear interpolation: p50 = the 3rd value; p90 at rank 3.6 = 4 + 0.6 * (10 - 4)
    assert st["p50"] == 3.0 and st["p90"] == pytest.approx(7.6) and st["p99"] == pytest.approx(9.76)
    assert st["mean"] == 4.0 and st["max"] == 10.0 and st["n"] == 5
    assert st["std"] == pytest.approx(np.std([1, 2, 3, 4, 10]), rel=1e-4)  # population, as np.std
    empty = serving_stats.dist_stats([])
    assert empty["n"] == 0 and empty["p50"] is None


def test_weighted_equals_numpy_on_the_expanded_list():
    rng = random.Random(3)
    for _ in range(50):
        pairs = [(rng.random(), rng.randint(1, 5)) for _ in range(rng.randint(1, 40))]
        flat = [v for v, w in pairs for _ in range(w)]
        st = serving_stats.weighted_stats(pairs, scale=1.0)
        for q, key in ((50, "p50"), (90, "p90"), (95, "p95"), (99, "p99")):
            assert st[key] == pytest.approx(float(np.percentile(flat, q)), abs=1e-4)
        assert st["mean"] == pytest.approx(float(np.mean(flat)), abs=1e-4)
        assert st["std"] == pytest.approx(float(np.std(flat)), abs=1e-4)
    # and a wrong weighting (each pair once) does not pass
    pairs = [(1.0, 9), (5.0, 1)]
    assert serving_stats.weighted_stats(pairs, 1.0)["p50"] == 1.0
    assert serving_stats.dist_stats([1.0, 5.0], 1.0)["p50"] == 3.0


def test_chunk_itls_spread_multi_token_chunks():
    # chunks at 0, 10, 40 ms carrying 1, 2, 3 tokens (cumulative 1, 3, 6)
    itl = serving_stats.chunk_itls([0.0, 0.010, 0.040], [1, 3, 6])
    assert itl == [(pytest.approx(0.005), 2), (pytest.approx(0.010), 3)]
    assert serving_stats.chunk_itls([0.0, 0.010, 0.040], None) == [(pytest.approx(0.010), 1), (pytest.approx(0.030), 1)]
    assert serving_stats.tpot_s(0.050, 0.010, 5) == pytest.approx(0.010)
    assert serving_stats.tpot_s(0.050, 0.010, 1) is None


def test_goodput_by_hand():
    slo = serving_stats.parse_slo("ttft=100,itl=20")
    met = [serving_stats.meets(serving_stats.observed_ms(t, lat, n, im), slo)
           for t, lat, n, im in ((0.05, 1.0, 10, 0.01), (0.15, 1.0, 10, 0.01), (0.05, 1.0, 10, 0.021),
                                 (0.1, 0.1, 1, None))]
    g = serving_stats.goodput([*met, None], slo, sent=5, duration_s=2.0)  # one failed request
    assert g["good"] == 2 and g["request_goodput"] == 1.0 and g["slo_attainment"] == 0.4
    assert g["attainment_by_metric"] == {"ttft": 0.6, "itl": 0.6}


@pytest.mark.parametrize("text", ["", "ttft", "ttft=", "ttft=abc", "ttft=0", "ttft=-5", "ttft=nan",
                                  "ttft=inf", "foo=3", "ttft=1,ttft=2"])
def test_bad_slo_strings(text):
    with pytest.raises(UserError) as e:
        serving_stats.parse_slo(text)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_slo_spellings():
    assert serving_stats.parse_slo("ttft:500 tpot:50") == {"ttft": 500.0, "tpot": 50.0}
    assert serving_stats.parse_slo("e2e=3000,itl=40") == {"e2el": 3000.0, "itl": 40.0}


def _requests(seed: int, counted: bool = True):
    """Synthetic finished streams: chunk times and token counts as a speculative server sends
    them (1 token first, then 1-4 per chunk), with one failed request."""
    rng = random.Random(seed)
    recs, entries = [], []
    opts = open_loop.OpenLoopOptions(url="http://x:1", rates=[1.0], items=[PromptItem("p")],
                                     slo={"ttft": 30.0, "tpot": 4.0, "e2el": 600.0})
    for i in range(30):
        n = rng.randint(2, 120)
        r = open_loop.StreamRecord(prompt_index=0, cap=n + 1)
        t, cum = rng.uniform(0.005, 0.05), 1
        r.on_text(t, cum if counted else None)
        r.ttft_s = t
        while cum < n:
            k = min(n - cum, rng.randint(1, 4))
            t += rng.uniform(0.002, 0.02)
            cum += k
            r.on_text(t, cum if counted else None)
        r.last_token_s, r.latency_s = t, t + 0.0005
        r.completion_tokens, r.prompt_tokens, r.first_chunk_tokens = n, 20, 1
        r.content_chunks = len(r.times)
        if i == 7:
            r.error = "stream closed by the server before the end (no finish_reason, no [DONE])"
        r.sent_at = 0.0
        recs.append(r)
        entries.append(open_loop._request_entry(open_loop.Planned(i, 0.0, 0, n), r, 0.0, 0.0, 0.0, opts))
    return recs, entries, opts


def _theirs(ns, recs, counted: bool):
    outs = []
    for r in recs:
        o = ns["RequestFuncOutput"]()
        o.success = r.error is None
        if o.success:
            o.ttft, o.latency, o.output_len = r.ttft_s, r.latency_s, r.completion_tokens
            o.itl = [r.times[k] - r.times[k - 1] for k in range(1, len(r.times))]
            # the chunk's text: one word per token (the tokenizer below counts words)
            o.text_chunks = [" ".join(["w"] * (r.cum[k] - r.cum[k - 1])) for k in range(1, len(r.times))]
            o.generated_text = " ".join(["w"] * r.completion_tokens)
        outs.append(o)

    class WordTok:
        def encode(self, text: str, **_: object) -> list[str]:
            return text.split()

    # accept_length reported (a speculative SGLang server): bench_serving's per-token ITL path
    return ns["calculate_metrics"](None, outs, 3.0, WordTok(), "sglang-oai-chat",
                                   accept_length=2.0 if counted else None)[0], outs


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
@pytest.mark.parametrize("counted", [True, False])
def test_summary_equals_bench_servings_calculate_metrics(version, counted):
    ns = bench_serving_src.load(version)
    recs, entries, opts = _requests(5, counted)
    ours = serving_stats.summarize_rate(entries, recs, 3.0, opts.slo)
    m, outs = _theirs(ns, recs, counted)
    assert ours["completed"] == m.completed == 29 and ours["failed"] == 1
    assert ours["request_throughput"] == pytest.approx(m.request_throughput, rel=1e-4)
    assert ours["output_throughput"] == pytest.approx(m.output_throughput, rel=1e-4)
    for key, name in (("ttft_ms", "ttft"), ("itl_ms", "itl"), ("tpot_ms", "tpot"), ("e2e_latency_ms", "e2e_latency")):
        for q, theirs in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"),
                          ("std", "std")):
            assert ours[key][q] == pytest.approx(getattr(m, f"{theirs}_{name}_ms"), abs=2e-4), (key, q)
    assert ours["itl_ms"]["max"] == pytest.approx(m.max_itl_ms, abs=2e-4)
    assert ours["concurrency"] == pytest.approx(m.concurrency, rel=1e-4)
    if counted:  # per-token ITL is not the chunk gap: the plain-chunk figure differs
        plain = serving_stats.summarize_rate(entries, [_uncounted(r) for r in recs], 3.0, None)
        assert plain["itl_ms"]["p50"] != pytest.approx(m.median_itl_ms, abs=1e-3)
    if version == "0.5.23":
        g = ns["calculate_goodput"](outs, {"ttft": 30.0, "tpot": 4.0, "e2el": 600.0}, 3.0)
        assert ours["goodput"]["request_goodput"] == pytest.approx(g.request_goodput, abs=1e-4)
        assert ours["goodput"]["slo_attainment"] == pytest.approx(g.slo_attainment, abs=1e-4)
        assert ours["goodput"]["attainment_by_metric"] == pytest.approx(g.slo_attainment_by_metric, abs=1e-4)
        assert 0 < ours["goodput"]["good"] < 29  # the SLOs split the requests (the check can fail)


def _uncounted(r):
    r2 = open_loop.StreamRecord(prompt_index=0, cap=r.cap)
    r2.__dict__.update({k: v for k, v in r.__dict__.items() if k != "counted"})
    r2.counted = False
    return r2


def _streams(n_req: int, chunks: int, seed: int = 0) -> tuple[list[dict], list]:
    """Finished stream records with chunk logs as the client keeps them (array('d') / array('q'))."""
    from array import array

    rng = random.Random(seed)
    reqs, recs = [], []
    for _ in range(n_req):
        r = open_loop.StreamRecord(prompt_index=0, cap=chunks + 1)
        t, c = 0.05, 0
        for _ in range(chunks):
            t += rng.choice((0.004, 0.005, 0.006)) + rng.random() * 1e-4
            c += rng.choice((1, 1, 2, 3))
            r.times.append(t)
            r.cum.append(c)
        assert isinstance(r.times, array)
        r.ttft_s, r.last_token_s, r.latency_s = r.times[0], r.times[-1], r.times[-1] + 0.001
        r.completion_tokens, r.first_chunk_tokens = r.cum[-1], r.cum[0]
        recs.append(r)
        reqs.append({"ttft_ms": r.ttft_s * 1000, "tokens": r.completion_tokens, "prompt_tokens": 5})
    return reqs, recs


_PEAK = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from test_serving_stats import _streams
from sglang_eagle3_ext.measure import serving_stats
reqs, recs = _streams(300, 1000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
summary = serving_stats.summarize_rate(reqs, recs, 10.0, None)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, summary["itl_ms"]["n"])
"""


def test_itl_figures_of_a_big_run_keep_nothing_per_chunk():
    """300 000 chunks: the ITL summary grows the process's peak memory by a few MiB at most (was:
    one tuple per chunk, ~170 MiB per million chunks, 17 GiB at 100 000 requests x 1000 tokens;
    here ~50 MiB). Peak RSS of a child, so nothing else of the suite counts."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-c", _PEAK, str(here)], capture_output=True, text=True, timeout=120,
                       cwd=here.parent)
    assert r.returncode == 0, r.stderr
    grew_kib, n = map(int, r.stdout.split())
    assert grew_kib < 12 * 1024 and n > 300_000, (grew_kib, n)


def test_itl_figures_equal_weighted_stats_on_the_expanded_pairs():
    reqs, recs = _streams(20, 300, seed=4)
    summary = serving_stats.summarize_rate(reqs, recs, 10.0, None)
    want = serving_stats.weighted_stats([p for r in recs for p in serving_stats.iter_itls(r.times, r.cum)])
    assert summary["itl_ms"] == want and summary["itl_ms"]["n"] == sum(r.cum[-1] - r.cum[0] for r in recs)


@pytest.mark.parametrize("collect", [1 << 16, 7, 1])
def test_streamed_quantiles_equal_the_sorted_ones(monkeypatch, collect):
    """quantiles.stats (the windows narrowed pass by pass) against weighted_stats (sorted), on
    spread, repeated, heavy-tailed and extreme values; COLLECT small forces the narrowing."""
    import math

    from sglang_eagle3_ext.measure import quantiles

    monkeypatch.setattr(quantiles, "COLLECT", collect)
    rng = random.Random(collect)
    cases = [[], [(0.5, 3)], [(0.005, 1)] * 500 + [(0.2, 0)],
             [(rng.random(), rng.randint(1, 5)) for _ in range(2000)],
             [(rng.choice((0.001, 0.002, 0.5)), rng.randint(1, 3)) for _ in range(1500)],
             [(rng.expovariate(100), 1) for _ in range(1000)] + [(1e9, 1)],
             [(10 ** rng.uniform(-300, 100), 1) for _ in range(800)] + [(5e-324, 2)]]
    for pairs in cases:
        got, want = quantiles.stats(lambda p=pairs: iter(p)), serving_stats.weighted_stats(pairs)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k] == want[k] or math.isclose(got[k], want[k], rel_tol=1e-12, abs_tol=1e-9), (k, got, want)
