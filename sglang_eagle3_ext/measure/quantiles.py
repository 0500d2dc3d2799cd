"""Exact mean / std / percentiles / max of a weighted multiset that is read, not stored.

The open loop's ITL figures cover one value per text chunk of every request: 10^8 at 100 000
requests x 1000 tokens. A list of (value, count) tuples costs ~170 MiB per million chunks (and a
sort of it more); here the values are recomputed from the streams' chunk logs on every pass
(``pairs()`` gives a fresh iterator), and nothing per value is kept:

1. one pass: count, sum, min, max;
2. one pass: the variance around the mean; a histogram of BUCKETS linear buckets over
   [min, max] (count, and the least and largest value, per bucket);
3. each rank a percentile needs lies in one bucket; that bucket's [least, largest] is the next
   window (bucketing is monotonic, so no value of another bucket lies inside it). Windows shrink
   until they hold one value or few enough pairs to sort (COLLECT); then the ranks are read off.

The figures are those of ``serving_stats.weighted_stats`` over the same pairs, exactly
(np.percentile's linear interpolation over the expanded list).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable

BUCKETS = 4096
COLLECT = 1 << 16   # pairs in a window that are simply sorted
MAX_ROUNDS = 64     # a float range narrows by ~BUCKETS per round; this bounds adversarial spacing
PERCENTILES = (50, 90, 95, 99)

Pairs = Callable[[], Iterable[tuple[float, int]]]


def stats(pairs: Pairs, scale: float = 1000.0) -> dict[str, float | None]:
    """mean / p50 / p90 / p95 / p99 / std / max (x ``scale``) and n, as weighted_stats."""
    keys = ("mean", "p50", "p90", "p95", "p99", "std", "max")
    n = count = 0
    total = 0.0
    lo, hi = math.inf, -math.inf
    for v, w in pairs():
        if w > 0:
            n += w
            count += 1
            total += v * w
            lo = min(lo, v)
            hi = max(hi, v)
    if not n:
        return {**{k: None for k in keys}, "n": 0}
    mean = total / n
    var = sum(w * (v - mean) ** 2 for v, w in pairs() if w > 0) / n
    pos = {q: (n - 1) * q / 100.0 for q in PERCENTILES}
    ranks = sorted({r for q in PERCENTILES for r in (int(pos[q]), min(int(pos[q]) + 1, n - 1))})
    at = ranked(pairs, ranks, lo, hi, count)
    out = {"mean": mean, "std": math.sqrt(var), "max": hi}
    for q in PERCENTILES:
        k = int(pos[q])
        frac = pos[q] - k
        out[f"p{q}"] = at[k] if frac == 0 else at[k] + (at[min(k + 1, n - 1)] - at[k]) * frac
    res: dict[str, float | None] = {k: round(out[k] * scale, 4) for k in keys}
    res["n"] = n
    return res


class _Window:
    """Values in [lo, hi] (``pairs`` of them), ``below`` weight under lo; the ranks (0-based, of
    the whole expanded multiset) inside."""

    def __init__(self, lo: float, hi: float, below: int, pairs: int) -> None:
        self.lo, self.hi, self.below, self.pairs = lo, hi, below, pairs
        self.ranks: list[int] = []
        self.collect = False
        self.kept: list[tuple[float, int]] = []
        self.weight = array("q", bytes(8 * BUCKETS))
        self.npairs = array("q", bytes(8 * BUCKETS))
        self.least = array("d", [math.inf]) * BUCKETS
        self.most = array("d", [-math.inf]) * BUCKETS

    def bucket(self, v: float) -> int:
        return min(BUCKETS - 1, int((v - self.lo) / (self.hi - self.lo) * BUCKETS))


def ranked(pairs: Pairs, ranks: list[int], lo: float, hi: float, count: int) -> dict[int, float]:
    """The value at each rank of the expanded sorted multiset (``count`` pairs, values in
    [lo, hi]; every rank below its total weight)."""
    found: dict[int, float] = {}
    first = _Window(lo, hi, 0, count)
    first.ranks = list(ranks)
    todo = [first]
    for round_ in range(MAX_ROUNDS + 1):
        for win in todo:
            if win.lo == win.hi:  # one value left
                found.update({r: win.lo for r in win.ranks})
        todo = [x for x in todo if x.lo != x.hi]
        if not todo:
            break
        for win in todo:
            win.collect = win.pairs <= COLLECT or round_ == MAX_ROUNDS
        _scan(pairs, todo)
        nxt: list[_Window] = []
        for win in todo:
            if win.collect:
                found.update(_read_off(win))
            else:
                nxt += _split(win)
        todo = nxt
    return found


def _scan(pairs: Pairs, wins: list[_Window]) -> None:
    for v, w in pairs():
        if w <= 0:
            continue
        for win in wins:
            if win.lo <= v <= win.hi:
                if win.collect:
                    win.kept.append((v, w))
                    continue
                i = win.bucket(v)
                win.weight[i] += w
                win.npairs[i] += 1
                if v < win.least[i]:
                    win.least[i] = v
                if v > win.most[i]:
                    win.most[i] = v


def _split(win: _Window) -> list[_Window]:
    """One sub-window per bucket that holds a rank: its [least, largest] value."""
    out: dict[int, _Window] = {}
    acc = win.below
    b = 0
    for r in win.ranks:
        while acc + win.weight[b] <= r:
            acc += win.weight[b]
            b += 1
        if b not in out:
            out[b] = _Window(win.least[b], win.most[b], acc, win.npairs[b])
        out[b].ranks.append(r)
    return list(out.values())


def _read_off(win: _Window) -> dict[int, float]:
    win.kept.sort()
    out: dict[int, float] = {}
    acc = win.below
    it = iter(win.kept)
    v, w = next(it)
    for r in win.ranks:
        while acc + w <= r:
            acc += w
            v, w = next(it)
        out[r] = v
    return out
