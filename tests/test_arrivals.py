"""The open-loop arrival process (measure/arrivals.py): the gaps' mean and variance against the
theory, draw-for-draw equality with numpy's legacy generator and with SGLang bench_serving's own
get_request (its release source, tests/bench_serving_src.py), its request order, and bad flags.

The draws are seeded, so every check is deterministic; each tolerance is a few standard errors
of the statistic over the draws, and each check is shown to reject a wrong process.
"""

from __future__ import annotations

import json
import math
import statistics

import bench_serving_src
import pytest

from sglang_eagle3_ext.measure import arrivals
from sglang_eagle3_ext.runtime.errors import UserError

N = 4000


def _mean_var_ok(xs: list[float], mean: float, var: float, kurt_excess: float) -> bool:
    """Sample mean and variance within 4 standard errors of the theory (SE of s^2 from the
    distribution's excess kurtosis: Var(s^2) ~ sigma^4 (2 + kurt) / n)."""
    n = len(xs)
    m, v = statistics.fmean(xs), statistics.pvariance(xs)
    se_m = math.sqrt(var / n)
    se_v = var * math.sqrt((2 + kurt_excess) / n)
    return abs(m - mean) < 4 * se_m and abs(v - var) < 4 * se_v


@pytest.mark.parametrize("rate", [0.5, 4.0, 100.0])
def test_poisson_gaps_mean_and_variance(rate):
    xs = arrivals.gaps(rate, 1.0, seed=7, count=N)
    assert _mean_var_ok(xs, 1 / rate, 1 / rate**2, 6.0)      # exponential: kurtosis excess 6
    # the check rejects a wrong process: uniform gaps of the same mean (variance 1/(3 R^2))
    wrong = [2 * x / rate for x in (arrivals.LegacyStream(7).double() for _ in range(N))]
    assert not _mean_var_ok(wrong, 1 / rate, 1 / rate**2, 6.0)


@pytest.mark.parametrize("k", [4.0, 0.5, 2.5])
def test_gamma_gaps_mean_and_variance(k):
    rate = 3.0
    xs = arrivals.gaps(rate, k, seed=11, count=N)
    # Gamma(shape K, scale 1/(R K)): mean 1/R, variance 1/(K R^2), kurtosis excess 6/K
    assert _mean_var_ok(xs, 1 / rate, 1 / (k * rate**2), 6 / k)
    # an exponential draw (K = 1) has the right mean and the wrong variance: it fails
    assert not _mean_var_ok(arrivals.gaps(rate, 1.0, seed=11, count=N), 1 / rate, 1 / (k * rate**2), 6 / k)
    # so does a Gamma whose scale forgot the K (mean K/R)
    s = arrivals.LegacyStream(11)
    assert not _mean_var_ok([s.gamma(k, 1 / rate) for _ in range(N)], 1 / rate, 1 / (k * rate**2), 6 / k)


def test_draws_equal_numpy_legacy_random_state():
    np = pytest.importorskip("numpy")
    for seed in (0, 42, 2**32 - 1):
        for shape in (1.0, 0.3, 4.0):
            s, r = arrivals.LegacyStream(seed), np.random.RandomState(seed)
            assert [s.gamma(shape, 0.25) for _ in range(1000)] == [float(r.gamma(shape, 0.25)) for _ in range(1000)]
        s, r = arrivals.LegacyStream(seed), np.random.RandomState(seed)
        assert [s.exponential(0.5) for _ in range(1000)] == [float(r.exponential(0.5)) for _ in range(1000)]
    # and it can fail: another seed gives other draws
    assert arrivals.gaps(2.0, 1.0, 1, 5) != [float(x) for x in np.random.RandomState(2).exponential(0.5, 5)]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_gaps_equal_bench_servings_get_request(version):
    """bench_serving's get_request after np.random.seed(S) sleeps exactly our gaps."""
    ns = bench_serving_src.load(version)
    for rate, seed in ((2.0, 42), (37.5, 1)):
        theirs = bench_serving_src.gaps_of(ns, 300, rate, seed)
        assert theirs == arrivals.gaps(rate, 1.0, seed, 300)
        times = arrivals.arrival_times(rate, 1.0, seed, count=300)
        assert times[0] == 0.0 and times[1:] == pytest.approx(
            [sum(theirs[:i]) for i in range(1, 300)], rel=1e-12)
    assert bench_serving_src.gaps_of(ns, 50, 2.0, 43) != arrivals.gaps(2.0, 1.0, 42, 50)
    assert bench_serving_src.gaps_of(ns, 5, float("inf"), 42) == []  # inf: no waits
    assert arrivals.arrival_times(float("inf"), 1.0, 42, count=5) == [0.0] * 5


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_order_equals_bench_servings_sharegpt_shuffle(tmp_path, version):
    """random.seed(S); sample_sharegpt_requests (its shuffle) gives our --order shuffle."""
    ns = bench_serving_src.load(version)
    items = [{"conversations": [{"from": "human", "value": f"prompt number {i} here"},
                                {"from": "gpt", "value": " ".join(["w"] * (3 + i))}]} for i in range(40)]
    f = tmp_path / "s.json"
    f.write_text(json.dumps(items))

    class WordTok:  # a tokenizer: its only use there is counting (prompt / output lengths)
        def encode(self, text: str, **_: object) -> list[str]:
            return text.split()

    for seed in (42, 5):
        ns["random"].seed(seed)
        rows = ns["sample_sharegpt_requests"](str(f), 25, WordTok())
        theirs = [int(r.prompt.split()[2]) for r in rows]
        assert theirs == arrivals.request_order(40, 25, seed, "shuffle")
        assert [r.output_len for r in rows] == [3 + i for i in theirs]  # the gpt answer's length
    assert arrivals.request_order(40, 25, 42, "file") == list(range(25))
    assert arrivals.request_order(3, 7, 0, "file") == [0, 1, 2, 0, 1, 2, 0]


def test_duration_keeps_arrivals_before_the_end():
    t = arrivals.arrival_times(10.0, 1.0, 3, duration_s=5.0)
    assert t[0] == 0 and all(x < 5.0 for x in t) and 30 < len(t) < 80
    nxt = t[-1] + arrivals.gaps(10.0, 1.0, 3, len(t))[-1]
    assert nxt >= 5.0  # the next draw would land after the end


@pytest.mark.parametrize("text", ["0", "-1", "nan", "NaN", "abc", "", "1,,2", "2,2", "1e9", "-inf"])
def test_bad_rates_are_one_line(text):
    with pytest.raises(UserError) as e:
        arrivals.parse_rates(text)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_rates_parse():
    assert arrivals.parse_rates("1, 2.5,inf") == [1.0, 2.5, math.inf]


@pytest.mark.parametrize("text", ["0", "x", "uniform:5", "uniform:9,3", "uniform:1.5,3", "lognormal:0,1",
                                  "lognormal:100,nan", "normal:1,2", "file"])
def test_bad_lengths(text):
    with pytest.raises(UserError) as e:
        arrivals.parse_lengths(text, "--output-len")
    assert e.value.exit_code == 2


def test_length_draws_are_seeded_and_clamped():
    d = arrivals.parse_lengths("lognormal:100,1.0", "--x")
    rng = arrivals.length_stream(1, "x")
    xs = [d.draw(rng, 8, 300) for _ in range(2000)]
    assert min(xs) >= 8 and max(xs) == 300 and 85 < statistics.median(xs) < 115
    rng2 = arrivals.length_stream(1, "x")
    assert [d.draw(rng2, 8, 300) for _ in range(2000)] == xs
    rng3 = arrivals.length_stream(2, "x")  # another seed, other lengths
    assert [d.draw(rng3, 8, 300) for _ in range(20)] != xs[:20]
    u = arrivals.parse_lengths("uniform:3,5", "--x")
    assert {u.draw(rng, 1, 100) for _ in range(200)} == {3, 4, 5}
    assert arrivals.parse_lengths("file", "--x", allow_file=True).kind == "file"


@pytest.mark.parametrize("k", [0.0, -1.0, math.nan, math.inf, 1e4])
def test_bad_burstiness(k):
    with pytest.raises(UserError):
        arrivals.check_burstiness(k)


@pytest.mark.parametrize("args, says", [
    (["--request-rate", "1", "--burstiness", "1e-320"], "--burstiness 1e-320: the Gamma shape, from 0.001"),
    (["--request-rate", "0.5", "--burstiness", "5e-324"], "--burstiness 5e-324: the Gamma shape"),
    (["--request-rate", "5e-324"], "--request-rate 5e-324: requests per second, from 1e-06"),
    (["--request-rate", "1e-5", "--num-requests", "100"], "the last is due about 9.9e+06 s"),
    (["--request-rate", "2,1e-5"], "--request-rate 1e-05 with 100 requests"),
    (["--request-rate", "1", "--output-len", "lognormal:5,nan"], "'lognormal:5,nan': 'nan' is not a number"),
    (["--request-rate", "1", "--output-len", "uniform:x,5"], "'uniform:x,5': 'x' is not a number"),
])
def test_rates_and_shapes_that_underflow_are_one_line_before_anything_is_sent(capsys, args, says):
    """Was: NaN arrival times (all sent at once, NaN in the result), ZeroDivisionError, a run
    that waits forever, 'nan' named as the value."""
    from sglang_eagle3_ext import cli

    rc = cli.main(["bench", "--url", "http://127.0.0.1:9", *args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and says in lines[0] and "bug" not in err, err


def test_the_smallest_allowed_shape_and_rate_give_finite_times():
    for rate, k in ((1.0, arrivals.MIN_BURSTINESS), (arrivals.MIN_RATE, arrivals.MIN_BURSTINESS),
                    (arrivals.MAX_RATE, arrivals.MIN_BURSTINESS), (arrivals.MIN_RATE, arrivals.MAX_BURSTINESS)):
        ts = arrivals.arrival_times(rate, k, 0, count=200)
        assert all(math.isfinite(t) for t in ts) and ts == sorted(ts)
