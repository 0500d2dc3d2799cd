"""When open-loop requests arrive, which prompt each sends and how long its answer is.

The arrival process is SGLang's and vLLM's, draw for draw, so ``--seed S`` replays the traffic
their serving benchmarks send with the same seed:

- SGLang ``python -m sglang.bench_serving`` (0.5.16 and 0.5.23, ``sglang/benchmark/serving.py``
  ``get_request`` after ``np.random.seed(args.seed)`` in ``run_benchmark``): the first request
  at 0, then after each request a gap ``np.random.exponential(1.0 / request_rate)``; rate ``inf``
  sends every request at once. It has no burstiness.
- vLLM's serving benchmark (``benchmarks/benchmark_serving.py`` ``get_request``): the gap is
  ``np.random.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness))``: mean 1/R,
  variance 1/(K R^2); K = 1 is the exponential (Poisson arrivals), K < 1 burstier, K > 1 more
  even. (Newer vLLM ``vllm/benchmarks/serve.py`` then rescales the cumulative times so the last
  lands on N/R; we do not.)

Both draw from numpy's legacy global ``RandomState``. ``LegacyStream`` is that generator in pure
Python (no numpy dependency): numpy's ``mt19937_seed`` (Knuth's init_genrand) loaded into
``random.Random`` (the same MT19937 and the same 53-bit double), then numpy's
``legacy_standard_exponential`` / ``legacy_standard_gamma`` / ``legacy_gauss``
(``numpy/random/src/legacy/legacy-distributions.c``). tests/test_arrivals.py checks it equals
``numpy.random.RandomState(seed)`` draw for draw and bench_serving's own ``get_request``.

The request order is bench_serving's ShareGPT order (``datasets/sharegpt.py``:
``random.seed(seed); random.shuffle(dataset)``): ``random.Random(seed).shuffle``. Output lengths
drawn from a distribution use their own stream, so they do not move the arrivals.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..runtime.errors import UserError

MAX_RATE = 1e6           # requests per second
MIN_RATE = 1e-6          # slower waits days per request (and 1/rate must stay a finite number)
MIN_BURSTINESS = 1e-3    # a smaller Gamma shape underflows (NaN or no gap at all)
MAX_SPAN_S = 1e6         # the last planned arrival: at most ~11.6 days after the first
MAX_REQUESTS = 100_000   # per rate: every request keeps a record (bounded memory)
MAX_BURSTINESS = 1e3
MAX_SEED = 2**32 - 1     # numpy's legacy seed range


class LegacyStream:
    """numpy ``RandomState(seed)``'s exponential and gamma draws, in pure Python."""

    def __init__(self, seed: int) -> None:
        key = [seed & 0xFFFFFFFF]
        for i in range(1, 624):  # mt19937_seed: init_genrand
            prev = key[-1]
            key.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self._rng = random.Random()
        self._rng.setstate((3, (*key, 624), None))  # pos 624: the next draw regenerates, as numpy
        self._gauss: float | None = None

    def double(self) -> float:
        return self._rng.random()  # genrand_res53 == numpy's mt19937_next_double

    def standard_exponential(self) -> float:
        return -math.log(1.0 - self.double())

    def exponential(self, scale: float) -> float:
        return scale * self.standard_exponential()

    def gauss(self) -> float:
        """legacy_gauss: the polar Box-Muller method, keeping the second value for the next call."""
        if self._gauss is not None:
            g, self._gauss = self._gauss, None
            return g
        while True:
            x1 = 2.0 * self.double() - 1.0
            x2 = 2.0 * self.double() - 1.0
            r2 = x1 * x1 + x2 * x2
            if 0.0 < r2 < 1.0:
                break
        f = math.sqrt(-2.0 * math.log(r2) / r2)
        self._gauss = f * x1
        return f * x2

    def standard_gamma(self, shape: float) -> float:
        if shape == 1.0:
            return self.standard_exponential()
        if shape == 0.0:
            return 0.0
        if shape < 1.0:
            while True:
                u = self.double()
                v = self.standard_exponential()
                if u <= 1.0 - shape:
                    x = u ** (1.0 / shape)
                    if x <= v:
                        return x
                else:
                    y = -math.log((1.0 - u) / shape)
                    x = (1.0 - shape + shape * y) ** (1.0 / shape)
                    if x <= v + y:
                        return x
        b = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * b)
        while True:
            while True:
                x = self.gauss()
                v = 1.0 + c * x
                if v > 0.0:
                    break
            v = v * v * v
            u = self.double()
            if u < 1.0 - 0.0331 * (x * x) * (x * x):
                return b * v
            if math.log(u) < 0.5 * x * x + b * (1.0 - v + math.log(v)):
                return b * v

    def gamma(self, shape: float, scale: float) -> float:
        return scale * self.standard_gamma(shape)


def gaps(rate: float, burstiness: float, seed: int, count: int) -> list[float]:
    """The first ``count`` inter-arrival gaps (seconds) of the process, as drawn."""
    s = LegacyStream(seed)
    if burstiness == 1.0:
        return [s.exponential(1.0 / rate) for _ in range(count)]
    theta = 1.0 / (rate * burstiness)
    return [s.gamma(burstiness, theta) for _ in range(count)]


def arrival_times(rate: float, burstiness: float, seed: int, *, count: int | None = None,
                  duration_s: float | None = None) -> list[float]:
    """Send times (seconds after the start): 0, then one gap after each request, until ``count``
    requests or the first arrival at or after ``duration_s``. Rate ``inf``: all at 0."""
    if math.isinf(rate):
        if count is None:
            raise UserError("--request-rate inf sends every request at once: give --num-requests, "
                            "not --duration", exit_code=2)
        return [0.0] * count
    s = LegacyStream(seed)
    theta = 1.0 / (rate * burstiness)
    out: list[float] = []
    t = 0.0
    while (count is None or len(out) < count) and (duration_s is None or t < duration_s):
        if len(out) >= MAX_REQUESTS:
            raise UserError(f"more than {MAX_REQUESTS} requests at {rate:g}/s: shorten --duration",
                            exit_code=2)
        out.append(t)
        t += s.exponential(1.0 / rate) if burstiness == 1.0 else s.gamma(burstiness, theta)
        if not math.isfinite(t):  # bounded flags keep this out; never send at a NaN time
            raise UserError(f"--request-rate {rate:g} with --burstiness {burstiness:g}: the arrival "
                            "times are no finite numbers; raise either", exit_code=2)
    return out


def check_span(rate: float, count: int) -> None:
    """``count`` requests at ``rate``/s take about count / rate seconds: more than MAX_SPAN_S is a
    run that never ends in practice (UserError 2, before anything is sent)."""
    if not math.isinf(rate) and count > 1 and (count - 1) / rate > MAX_SPAN_S:
        raise UserError(f"--request-rate {rate:g} with {count} requests: the last is due about "
                        f"{(count - 1) / rate:.3g} s after the first (more than {MAX_SPAN_S:g} s); "
                        "raise the rate or send fewer requests", exit_code=2)


def request_order(n_prompts: int, n_requests: int, seed: int, order: str) -> list[int]:
    """Which prompt request i sends: the file order, or bench_serving's shuffle; cycled."""
    idx = list(range(n_prompts))
    if order == "shuffle":
        random.Random(seed).shuffle(idx)
    return [idx[i % n_prompts] for i in range(n_requests)]


# ---------------------------------------------------------------- flags


def _number(text: str, flag: str, whole: str | None = None) -> float:
    """``text`` as a number (not NaN); the message names ``whole``, the flag's value, when
    ``text`` is a part of it."""
    part = whole is not None and whole != text
    bad = UserError(f"{flag} {whole!r}: {text!r} is not a number" if part else f"{flag} {text!r}: not a number",
                    exit_code=2)
    try:
        v = float(text)
    except ValueError:
        raise bad from None
    if math.isnan(v):
        raise bad
    return v


def parse_rates(text: str) -> list[float]:
    """``--request-rate 1,2.5,inf``: distinct rates > 0 (req/s), ``inf`` = all at once."""
    items = [x.strip() for x in str(text).split(",")]
    if not items or any(not x for x in items):
        raise UserError(f"--request-rate {text!r}: a rate or a comma list like 1,2,4,inf", exit_code=2)
    rates = []
    for x in items:
        v = _number(x, "--request-rate")
        if not (MIN_RATE <= v <= MAX_RATE or (math.isinf(v) and v > 0)):
            raise UserError(f"--request-rate {x}: requests per second, from {MIN_RATE:g} to "
                            f"{MAX_RATE:g} (or inf: all at once)", exit_code=2)
        rates.append(v)
    if len(set(rates)) != len(rates):
        raise UserError(f"--request-rate {text!r}: each rate once", exit_code=2)
    return rates


def check_burstiness(k: float) -> float:
    if not (MIN_BURSTINESS <= k <= MAX_BURSTINESS):  # NaN fails too
        raise UserError(f"--burstiness {k!r}: the Gamma shape, from {MIN_BURSTINESS:g} to "
                        f"{MAX_BURSTINESS:g} (1 = Poisson, smaller is burstier)", exit_code=2)
    return float(k)


def check_seed(seed: int) -> int:
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed {seed}: between 0 and {MAX_SEED} (numpy's seed range, as "
                        "bench_serving's)", exit_code=2)
    return seed


@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``N``, ``uniform:LO,HI`` or ``lognormal:MEDIAN,SIGMA`` (clamped to
    [low, high]); ``file`` = each prompt's own length."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def draw(self, rng: random.Random, low: int, high: int) -> int:
        if self.kind == "fixed":
            v = self.a
        elif self.kind == "uniform":
            v = rng.randint(int(self.a), int(self.b))
        else:
            v = rng.lognormvariate(math.log(self.a), self.b)
        return max(low, min(high, int(round(v))))

    def text(self) -> str:
        return {"fixed": f"{self.a:g}", "uniform": f"uniform:{self.a:g},{self.b:g}",
                "lognormal": f"lognormal:{self.a:g},{self.b:g}"}.get(self.kind, self.kind)


def parse_lengths(text: str, flag: str, allow_file: bool = False) -> Lengths:
    s = str(text).strip()
    bad = UserError(f"{flag} {text!r}: N, uniform:LO,HI or lognormal:MEDIAN,SIGMA"
                    + (" or file" if allow_file else ""), exit_code=2)
    if s == "file" and allow_file:
        return Lengths("file")
    kind, _, rest = s.partition(":")
    if not rest:
        if not s.isdigit() or not 1 <= int(s) <= 1_000_000:
            raise bad
        return Lengths("fixed", float(int(s)))
    parts = rest.split(",")
    if kind not in ("uniform", "lognormal") or len(parts) != 2:
        raise bad
    a, b = (_number(p, flag, str(text)) for p in parts)
    if kind == "uniform" and not (a == int(a) and b == int(b) and 1 <= a <= b <= 1_000_000):
        raise UserError(f"{flag} {text!r}: uniform:LO,HI with whole numbers 1 <= LO <= HI", exit_code=2)
    if kind == "lognormal" and not (1 <= a <= 1_000_000 and 0 <= b <= 10):
        raise UserError(f"{flag} {text!r}: lognormal:MEDIAN,SIGMA with MEDIAN >= 1 and 0 <= SIGMA <= 10",
                        exit_code=2)
    return Lengths(kind, a, b)


def length_stream(seed: int, what: str) -> random.Random:
    """A stream of its own per use (``random.Random`` seeds text through SHA-512: stable)."""
    return random.Random(f"sgl-eagle3/{what}/{seed}")
