"""The throughput policy: at each decode cycle, the step count that delivers the most tokens per ms.

Runs inside SGLang (installed as the step-control decider, ``stepctl.install``): standard library
only at module level, never raises into SGLang (every public call falls back to a safe answer).

    rate(steps, bs) = E[tokens per request per cycle](steps) / cycle_ms(steps, pad(bs))

- ``cycle_ms`` comes from a scan result file (``eagle3_scan/1``, ``cells[*].{steps, bs,
  cycle_ms}``) read once at start. A batch size is padded to the CUDA-graph batch size SGLang
  replays it with (``pad_batch``), cells are keyed by their padded size, and between measured
  sizes the cost is interpolated linearly in batch size (a decode cycle costs about a + b x bs);
  beyond the largest it is extrapolated from the last two (never falling), below the smallest it
  is the smallest's.
- ``E`` = 1 + sum_i prod_{j<=i} p_j over the conditional per-position acceptance p_j (the
  probes' ``per_position``: P(accept position j | accepted 1..j-1)), counted online from every
  verify result (``observe``), with a prior of ``prior_weight`` pseudo-requests at the scan's
  cycle-weighted ``per_position`` (or a flat rate solved from ``accept_len`` where a cell has
  none). Counts are halved when position 1 has seen ``half_life`` requests, so a change of
  traffic shows within a few thousand requests.
- Rates beyond the chosen step count are only seen while a larger one runs: every
  ``explore_every``-th decode cycle of a tier runs the next larger built candidate (one cycle,
  the tier's choice unchanged). A pure function of the tier's cycle count.
- A tier (the padded batch size) switches only when the best candidate beats its current choice
  by more than ``hysteresis_pct`` % and it has held that choice for ``min_dwell`` of its cycles.
- Step 0 (SGLang's 0-step state, which is not plain decoding) is a candidate at a tier only where
  the scan table itself says it beats 1 step there (its cells' ``accept_len`` for 1 step).

Rank-safe: every decision is a pure function of the table, the batch sizes and the accept counts
(identical on every TP rank); no clock, no timing, no signal, no probe window is read. The
reporting counters (``take_window``) are kept apart and never feed a decision.
"""

from __future__ import annotations

import bisect
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bounds import MAX_BATCH, MAX_COUNT, MAX_STEPS
from .policy_trees import TreeRules, is_tree_cell, tree_table
from .policy_trees import num_field as _num
from .safeparse import load_json_file

SCHEMA = "eagle3_scan/1"
NAME = "policy"

DEFAULT_HYSTERESIS_PCT = 2.0
DEFAULT_MIN_DWELL = 16          # cycles of the tier
DEFAULT_EXPLORE_EVERY = 64      # every 64th cycle of a tier runs the next larger candidate
DEFAULT_PRIOR_WEIGHT = 64       # pseudo-requests behind the scan's per-position rates
DEFAULT_HALF_LIFE = 2048        # requests at position 1 before all counts are halved


# ------------------------------------------------------------------ CUDA-graph padding

def default_cuda_graph_bs(max_bs: int = 256) -> list[int]:
    """SGLang's decode capture sizes under speculative decoding, up to ``max_bs``.

    Mirrors 0.5.16 ``server_args.py`` ``_generate_decode_cuda_graph_batch_sizes`` (spec branch;
    0.5.23 ``arg_groups/cuda_graph_hook.py``, same lists). The server's own list (its
    ``--cuda-graph-max-bs``, memory) is used instead when the controller gives it
    (``set_cuda_graph_bs``).
    """
    bs = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
          + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16)))
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def pad_batch(batch_size: int, graph_bs: Sequence[int] | None) -> int:
    """The batch size SGLang runs ``batch_size`` at: the next capture size, or itself above the
    largest (eager). Same rule as 0.5.16 ``adaptive_spec_params.py``
    ``AdaptiveSpeculativeParams._pad_to_cuda_graph_bs`` and the graph runner's bisect."""
    if not graph_bs:
        return batch_size
    i = bisect.bisect_left(graph_bs, batch_size)
    return graph_bs[i] if i < len(graph_bs) else batch_size


# ------------------------------------------------------------------ the scan table

def expected_tokens(rates: Sequence[float], steps: int) -> float:
    """Tokens per request per cycle (incl. the bonus) at ``steps`` from conditional rates."""
    e, run = 1.0, 1.0
    for i in range(steps):
        run *= rates[i] if i < len(rates) else 0.0
        e += run
    return e


def _flat_rate(accept_len: float, steps: int) -> float:
    """The constant per-position rate p with 1 + p + ... + p^steps = accept_len (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if expected_tokens([mid] * steps, steps) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class ScanTable:
    """What the policy reads of a scan: cycle ms per (steps, padded bs), the per-position prior,
    and the table's own accept length per step count (for the step-0 rule)."""

    cells: list[tuple[int, int, float, float, bool]]  # (steps, bs, cycle ms, weight, eager) as read
    prior: list[float]                            # conditional rate per position 1..max steps
    accept_len: dict[int, float]                  # steps -> cycle-weighted accept length (incl. bonus)
    graph_bs: list[int] | None
    source: str = ""
    points: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # steps -> [(padded bs, ms)]
    trees: Any = None  # the trees' own table (policy_trees.tree_table: keyed by label), None: chains only

    def __post_init__(self) -> None:
        self.regraph(self.graph_bs)

    def regraph(self, graph_bs: Sequence[int] | None) -> None:
        """Key the cells by the batch size they ran at under these capture sizes (a cell measured
        eagerly keeps its own); cells on one padded size merge, weighted by cycles."""
        self.graph_bs = sorted(set(int(b) for b in graph_bs)) if graph_bs else None
        merged: dict[tuple[int, int], list[float]] = {}
        for steps, bs, ms, w, eager in self.cells:
            e = merged.setdefault((steps, bs if eager else pad_batch(bs, self.graph_bs)), [0.0, 0.0])
            e[0] += ms * w
            e[1] += w
        self.points = {}
        for (steps, padded), (s, w) in sorted(merged.items()):
            self.points.setdefault(steps, []).append((padded, s / w))
        if self.trees is not None:
            self.trees.regraph(graph_bs)

    @property
    def candidates(self) -> list[int]:
        return sorted(self.points)

    def cycle_ms(self, steps: int, batch_size: int) -> float | None:
        """Cycle ms at ``steps`` for a batch of ``batch_size`` (padded here), or None when the
        table has no cell at that step count."""
        pts = self.points.get(steps)
        if not pts:
            return None
        q = pad_batch(batch_size, self.graph_bs)
        xs = [b for b, _ in pts]
        i = bisect.bisect_left(xs, q)
        if i < len(xs) and xs[i] == q:
            return pts[i][1]
        if i == 0:
            return pts[0][1]
        if i == len(xs):
            if len(pts) == 1:
                return pts[0][1]
            (b0, m0), (b1, m1) = pts[-2], pts[-1]
            return m1 + max(0.0, (m1 - m0) / (b1 - b0)) * (q - b1)
        (b0, m0), (b1, m1) = pts[i - 1], pts[i]
        return m0 + (m1 - m0) * (q - b0) / (b1 - b0)

    def table_rate(self, steps: int, batch_size: int) -> float | None:
        """Tokens per ms per request by the table alone (its accept length, not online rates)."""
        ms = self.cycle_ms(steps, batch_size)
        if ms is None or ms <= 0:
            return None
        al = 1.0 if steps == 0 else self.accept_len.get(steps)
        if al is None:
            al = expected_tokens(self.prior, steps)
        return al / ms

    def zero_allowed(self, batch_size: int) -> bool:
        """Step 0 only where the table says it beats 1 step at this (padded) batch size."""
        r0, r1 = self.table_rate(0, batch_size), self.table_rate(1, batch_size)
        return r0 is not None and (r1 is None or r0 > r1)


def table_from_doc(doc: Any, graph_bs: Sequence[int] | None = None, source: str = "") -> ScanTable:
    """The policy's table from a scan result document; ValueError with one line on bad input."""
    where = source or "scan result"
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise ValueError(f"{where}: not a scan result ({SCHEMA}; got {got!r})")
    cells = doc.get("cells")
    if not isinstance(cells, list) or not cells:
        raise ValueError(f"{where}: no cells (the scan measured nothing)")
    raw: list[tuple[int, int, float, float, bool]] = []
    main: list[bool] = []                               # per raw cell: its level's own batch size
    pos: dict[int, list[float]] = {}                    # position -> [rate x weight, weight]
    acc: dict[int, list[float]] = {}
    for n, c in enumerate(cells):
        cw = f"{where}: cells[{n}]"
        if not isinstance(c, Mapping):
            raise ValueError(f"{cw} is not an object")
        steps, bs = c.get("steps"), c.get("bs")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_STEPS:
            raise ValueError(f"{cw}: steps {steps!r} is not a step count 0..{MAX_STEPS}")
        if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= MAX_BATCH:
            raise ValueError(f"{cw}: bs {bs!r} is not a batch size 1..{MAX_BATCH}")
        if is_tree_cell(c):
            continue  # a tree's cell (scan --trees): its own table, never merged into the chain of its steps
        if c.get("cycle_ms") is None:
            continue  # a cell the scan could not measure (interrupted): no cost, skipped
        ms = _num(c.get("cycle_ms"), "cycle_ms", cw, positive=True)
        n = c.get("cycles")
        w = float(n) if isinstance(n, int) and not isinstance(n, bool) and 0 < n < MAX_COUNT else float(MIN_CELL_CYCLES)
        raw.append((steps, bs, ms, w, c.get("graph") is False))
        main.append(is_main(c))
        if steps == 0:
            continue
        pp = c.get("per_position")
        al = c.get("accept_len")
        if al is not None:
            al = _num(al, "accept_len", cw)
            if not 1.0 <= al <= steps + 1 + 1e-9:
                raise ValueError(f"{cw}: accept_len {al} outside [1, steps + 1] (incl. the bonus)")
            a = acc.setdefault(steps, [0.0, 0.0])
            a[0] += al * w
            a[1] += w
        if pp:
            if not isinstance(pp, list) or len(pp) > steps:
                raise ValueError(f"{cw}: per_position must be a list of at most steps rates")
            # None = no request reached that position in this cell (probes/window.py per_position_rates)
            rates = [None if r is None else _num(r, "per_position rate", cw) for r in pp]
            if any(r is not None and not 0.0 <= r <= 1.0 for r in rates):
                raise ValueError(f"{cw}: per_position rates must lie in [0, 1]")
        elif al is not None:
            rates = [_flat_rate(al, steps)] * steps
        else:
            rates = []
        for i, r in enumerate(rates):
            if r is None:
                continue
            p = pos.setdefault(i, [0.0, 0.0])
            p[0] += r * w
            p[1] += w
    if not raw:
        raise ValueError(f"{where}: no cell has a cycle_ms")
    raw = _drop_thin(raw, main)
    top = max(c[0] for c in raw)
    if top < 1:
        raise ValueError(f"{where}: only step 0 was measured: nothing to speculate with")
    if not pos:
        raise ValueError(f"{where}: no cell has per_position or accept_len: no acceptance to start from")
    prior = []
    for i in range(top):
        if i in pos:
            prior.append(pos[i][0] / pos[i][1])
        else:
            prior.append(prior[-1] if prior else 0.5)  # a position no cell reached: the last known
    gbs = list(graph_bs) if graph_bs else default_cuda_graph_bs()
    return ScanTable(raw, prior, {s: a / w for s, (a, w) in acc.items()}, gbs, source,
                     trees=tree_table(cells, gbs, where, ScanTable, MIN_CELL_CYCLES))


MIN_CELL_CYCLES = 20  # a drain cell of fewer cycles (a batch size passed through while a level drains) is noise


def is_main(cell: Mapping[str, Any]) -> bool:
    """A cell measured at the batch size its level aimed at (``bs == level``); the others are a
    level's drain batch sizes (requests finishing one by one). A cell without a level (a table
    written by hand) counts as main. scan_doc.main_cells is this rule too."""
    level = cell.get("level")
    return level is None or cell.get("bs") == level


def _drop_thin(raw: list[tuple[int, int, float, float, bool]], main: list[bool]
               ) -> list[tuple[int, int, float, float, bool]]:
    """Leave out thin drain cells (fewer than MIN_CELL_CYCLES cycles, not at their level's batch
    size) whose batch size lies between main cells of the same step count: their few cycles
    would bend the interpolation between measured levels. A level's main cells are always kept,
    however few cycles they hold (issue 34 case 4: a 10-cycle main cell dropped for a 20-cycle
    one at another batch size made the policy cost it by extrapolation and pick the worst step
    count), and so is a drain cell outside the span (dropping it would replace a measured cost by
    an extrapolated one)."""
    span: dict[int, tuple[int, int]] = {}
    for (steps, bs, *_), m in zip(raw, main, strict=True):
        if m:
            lo, hi = span.get(steps, (bs, bs))
            span[steps] = (min(lo, bs), max(hi, bs))
    keep = []
    for c, m in zip(raw, main, strict=True):
        steps, bs, _, w, _ = c
        lo, hi = span.get(steps, (bs + 1, bs - 1))
        if m or w >= MIN_CELL_CYCLES or not lo < bs < hi:
            keep.append(c)
    return keep


def scan_file(path: str | Path) -> Path:
    """The scan.json a path names: the file itself, or scan.json inside a scan folder (every other
    reader of a scan takes either); ValueError for ``~user`` of an unknown user."""
    try:
        p = Path(path).expanduser()
    except RuntimeError:
        raise ValueError(f"{path}: names the home folder of an unknown user") from None
    return p / "scan.json" if p.is_dir() else p


def load_table(path: str | Path, graph_bs: Sequence[int] | None = None) -> ScanTable:
    """Read and check a scan result file (or folder) with the bounded reader every document
    reader uses (safeparse: a regular file of at most DOC_LIMIT, finite numbers, integers of sane
    size, limited depth); ValueError (one line) on anything unusable, nothing else."""
    p = scan_file(path)
    doc = load_json_file(p, what="a scan result")
    try:
        return table_from_doc(doc, graph_bs, str(p))
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - a shape table_from_doc did not foresee: one line still
        raise ValueError(f"{p}: not a usable scan result ({type(exc).__name__}: {exc})") from None


# ------------------------------------------------------------------ the decider


@dataclass
class _Tier:
    steps: int | None = None    # the tier's choice
    dwell: int = 0              # cycles since the choice was made
    cycles: int = 0             # decode cycles of this tier (drives exploration)


@dataclass
class _Report:
    """Reporting only (never read by a decision): per batch size, per steps run."""

    cycles: dict[int, dict[int, int]] = field(default_factory=dict)
    explore: dict[int, dict[int, int]] = field(default_factory=dict)
    expected: dict[int, dict[int, float]] = field(default_factory=dict)  # sum of expected per-stream tok/s
    switches: int = 0


class PolicyDecider:
    """The ``stepctl`` Decider of issue 25 (name "policy")."""

    name = NAME

    def __init__(self, table: ScanTable, *, hysteresis_pct: float = DEFAULT_HYSTERESIS_PCT,
                 min_dwell: int = DEFAULT_MIN_DWELL, explore_every: int = DEFAULT_EXPLORE_EVERY,
                 prior_weight: int = DEFAULT_PRIOR_WEIGHT, half_life: int = DEFAULT_HALF_LIFE) -> None:
        self.table = table
        self.hysteresis = hysteresis_pct / 100.0
        self.min_dwell = max(0, int(min_dwell))
        self.explore_every = max(0, int(explore_every))
        self.prior_weight = max(0, int(prior_weight))
        self.half_life = max(1, int(half_life))
        n = len(table.prior)
        self.trials = [0] * n       # requests that reached position i+1
        self.hits = [0] * n         # ... and had it accepted
        self.tiers: dict[int, _Tier] = {}
        self.total = _Report()
        self._window = _Report()
        self._problem: str | None = None
        self._rates: list[float] | None = None   # cache, dropped by every observe
        self._etoks: list[float] | None = None   # expected tokens per steps, same life
        self._cost_cache: dict[tuple[int, tuple[int, ...]], dict[int, float]] = {}

    @property
    def candidates(self) -> list[int]:
        return self.table.candidates

    def describe(self) -> str:
        return (f"throughput policy from {self.table.source or 'a scan table'}: candidates "
                f"{self.table.candidates}, hysteresis {self.hysteresis * 100:g} %, dwell {self.min_dwell} "
                f"cycles, exploration every {self.explore_every} cycles per tier")

    # -- what the decision reads

    def rates(self) -> list[float]:
        if self._rates is None:
            w = self.prior_weight
            self._rates = [(h + w * p) / (t + w) if t + w > 0 else p
                           for h, t, p in zip(self.hits, self.trials, self.table.prior, strict=True)]
        return self._rates

    def eligible(self, batch_size: int, built: Sequence[int]) -> list[int]:
        """Built step counts the table can cost here (0 only where the table says it beats 1)."""
        return sorted(self._costs(batch_size, built))

    def _costs(self, batch_size: int, built: Sequence[int]) -> dict[int, float]:
        """{steps: table cycle ms} of the eligible built states at this batch size. The table
        never changes while serving, so this is cached per (padded batch size, built states)."""
        key = (pad_batch(batch_size, self.table.graph_bs), tuple(built))
        got = self._cost_cache.get(key)
        if got is None:
            got = {}
            for s in sorted(set(built)):
                ms = self.table.cycle_ms(s, batch_size)
                if ms is not None and ms > 0:
                    got[s] = ms
            if 0 in got and not self.table.zero_allowed(batch_size):
                del got[0]
            self._cost_cache[key] = got
        return got

    def _expected(self) -> list[float]:
        """Expected tokens per request at 0..max steps from the current rates (one pass)."""
        if self._etoks is None:
            e, run, out = 1.0, 1.0, [1.0]
            for p in self.rates():
                run *= p
                e += run
                out.append(e)
            self._etoks = out
        return self._etoks

    def best(self, batch_size: int, cands: Sequence[int]) -> tuple[int, dict[int, float]]:
        costs = self._costs(batch_size, cands)
        et = self._expected()
        r = {s: (et[s] if s < len(et) else et[-1]) / ms for s, ms in costs.items()}
        return max(r, key=lambda s: (r[s], -s)), r   # a tie goes to the fewer steps

    # -- the Decider protocol

    def _settle(self, t: _Tier, best: Any, r: Mapping[Any, float]) -> None:
        """A new tier (or a gone choice) takes the best now, else after min_dwell and the hysteresis."""
        if t.steps not in r or (best != t.steps and t.dwell >= self.min_dwell
                                and r[best] > r[t.steps] * (1.0 + self.hysteresis)):
            if t.steps in r:  # a switch, not a first choice
                self.total.switches += 1
                self._window.switches += 1
            t.steps, t.dwell = best, 0
        t.dwell += 1

    def choose(self, batch_size: int, current: int, built: Sequence[int]) -> int:
        try:
            return self._choose(int(batch_size), int(current), built)
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang; hold what runs
            self._warn(f"policy decider: {exc!r}; holding the current step count")
            return current if current in built else (max(built) if built else current)

    def _choose(self, batch_size: int, current: int, built: Sequence[int]) -> int:
        costs = self._costs(batch_size, built)
        if not costs:
            return current if current in built else max(built)
        key = pad_batch(batch_size, self.table.graph_bs)
        t = self.tiers.setdefault(key, _Tier())
        t.cycles += 1
        cands = sorted(costs)
        best, r = self.best(batch_size, cands)
        self._settle(t, best, r)
        run, explore = t.steps, False
        if self.explore_every and t.cycles % self.explore_every == 0:
            up = [s for s in cands if s > t.steps]
            if up:
                run, explore = up[0], True
        self._count(batch_size, run, explore, r.get(run))
        return run

    def observe(self, correct_drafts_per_req: Sequence[int], batch_size: int, steps: int) -> None:
        try:
            self._observe(correct_drafts_per_req, int(steps))
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang
            self._warn(f"policy decider (observe): {exc!r}")

    def _observe(self, correct: Sequence[int], steps: int) -> None:
        n = min(steps, len(self.trials))
        if n <= 0:
            return                                 # step 0 drafts nothing: no acceptance seen
        if not correct:
            return
        self._rates = self._etoks = None
        if min(correct) < 0 or max(correct) > steps:
            correct = [min(max(int(c), 0), steps) for c in correct]
        for c, k in Counter(correct).items():     # O(distinct counts x steps), not O(requests)
            c = int(c)
            for i in range(min(c + 1, n)):         # positions 1..c accepted, c+1 rejected
                self.trials[i] += k
                if i < c:
                    self.hits[i] += k
        if self.trials[0] >= self.half_life:
            self.trials = [x // 2 for x in self.trials]
            self.hits = [x // 2 for x in self.hits]

    # -- hooks the step control may call

    def set_cuda_graph_bs(self, graph_bs: Sequence[int] | None) -> None:
        """The server's own capture sizes (``AdaptiveSpeculativeParams._cuda_graph_bs``): the table's
        cells are re-keyed by them. The same list on every rank, so still rank-safe."""
        try:
            if graph_bs and sorted(set(graph_bs)) != self.table.graph_bs:
                self.table.regraph(graph_bs)
                self._cost_cache.clear()
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang
            self._warn(f"policy decider (graph sizes): {exc!r}")

    # -- visibility (reporting only)

    def _count(self, batch_size: int, steps: int, explore: bool, rate: float | None) -> None:
        for rep in (self.total, self._window):
            d = rep.cycles.setdefault(batch_size, {})
            d[steps] = d.get(steps, 0) + 1
            if explore:
                x = rep.explore.setdefault(batch_size, {})
                x[steps] = x.get(steps, 0) + 1
            if rate is not None:
                e = rep.expected.setdefault(batch_size, {})
                e[steps] = e.get(steps, 0.0) + rate * 1000.0

    def take_window(self) -> dict[str, Any]:
        """What was chosen since the last call (the probe window): the record's ``control``."""
        rep, self._window = self._window, _Report()
        return self._control(rep)

    def window_control(self) -> dict[str, Any]:
        """The ``policy`` part of a probe record's ``control`` (stepctl.control calls this once per
        window): the decider's own choices since the last call, with what it expected of them."""
        w = self.take_window()
        return {**w["policy"], "chosen": w["choices"]}

    def summary(self) -> dict[str, Any]:
        """Everything chosen since start, same shape as ``take_window``."""
        return self._control(self.total)

    def _control(self, rep: _Report) -> dict[str, Any]:
        exp = {str(bs): {str(s): round(v / rep.cycles[bs][s], 2) for s, v in d.items()}
               for bs, d in sorted(rep.expected.items())}
        return {
            "decider": NAME,
            "block": None,
            "candidates": self.table.candidates,
            "choices": {str(bs): {str(s): n for s, n in sorted(d.items(), key=_by_key)}
                        for bs, d in sorted(rep.cycles.items())},
            "policy": {
                "explore": {str(bs): {str(s): n for s, n in sorted(d.items(), key=_by_key)}
                            for bs, d in sorted(rep.explore.items())},
                "expected_per_stream_tok_s": exp,
                "expected_def": "per-stream tok/s the policy expected of the cycles it chose: expected "
                                "tokens per request (online per-position rates) / table cycle ms",
                "switches": rep.switches,
                "rates": [round(r, 4) for r in self.rates()],
                "tiers": {str(k): t.steps for k, t in sorted(self.tiers.items())},
                "source": self.table.source,
            },
        }

    def _warn(self, msg: str) -> None:
        if msg != self._problem:
            self._problem = msg
            sys.stderr.write(f"EAGLE3 warning: {msg}\n")


def _by_key(kv: tuple[Any, Any]) -> tuple[bool, int, str]:
    """Chains (int steps) first by steps, then trees by label: one order for mixed state keys."""
    k = kv[0]
    return (isinstance(k, str), 0 if isinstance(k, str) else int(k), str(k))


def make_decider(info: Any, path: str | Path | None, **knobs: Any) -> PolicyDecider:
    """The decider for a live controller (``stepctl.make_decider`` calls this once, after SGLang
    built its states): the table keyed by the server's own CUDA-graph sizes. ValueError, with
    the reason, when the file is unusable or costs none of the built states (the server then
    refuses to start rather than run a policy that cannot choose)."""
    if path is None:
        raise ValueError("the policy needs a scan result file (SGLANG_EAGLE3_POLICY)")
    table = load_table(path)
    # the server's capture sizes; None = CUDA graphs off: every batch runs at its own size
    graph = getattr(info, "cuda_graph_bs", None)
    table.regraph(list(graph) if graph else None)
    everything = list(getattr(info, "built", ()) or ())
    built = sorted(s for s in everything if not isinstance(s, str))
    costed = [s for s in built if s in table.points]
    if built and not costed:
        raise ValueError(f"{path}: the scan costs steps {table.candidates}, none of the server's "
                         f"states {built}; launch with --policy so both come from the same scan")
    held = [s for s in everything if isinstance(s, str)]
    if held or table.trees is not None:  # trees beside the chains: policy_trees.py
        uncosted = [t for t in held if table.trees is None or t not in table.trees.points]
        if uncosted:
            raise ValueError(f"{path}: the scan has no cell for tree(s) {', '.join(uncosted)} the server holds; "
                             "scan them with `sgl-eagle3 scan --trees` first")
        elig = getattr(info, "eligible", None)
        return TreeDecider(table, eligible=elig if callable(elig) else None, **knobs)
    return PolicyDecider(table, **knobs)


class TreeDecider(TreeRules, PolicyDecider):
    """Chains by PolicyDecider's rules, trees beside them (policy_trees.TreeRules)."""

    _pad, _tier_cls, _report_cls = staticmethod(pad_batch), _Tier, _Report


def from_file(path: str | Path, **knobs: Any) -> tuple[PolicyDecider | None, str | None]:
    """(decider, None), or (None, why) for an unusable scan file: never raises (SGLang side)."""
    try:
        return PolicyDecider(load_table(path), **knobs), None
    except Exception as exc:  # noqa: BLE001
        return None, str(exc)
