"""The throughput policy over chains AND trees: per decode cycle, the state (chain or tree) that
delivers the most tokens per ms at this batch size.

Runs inside SGLang (stdlib only, never raises into SGLang), like policy.py, whose chain rules it
keeps unchanged. What trees add:

- **costs** per (tree label, padded batch size) from a scan that held the trees (``scan --trees``:
  cells with topk > 1, keyed by their label ``STEPSxTOPKxTOKENS``; policy.table_from_doc leaves
  them out of the chain table, so a tree never merges with the chain of its step count);
- **acceptance per tree, counted online**: tokens per request per verify of the tree's own cycles
  (chain cycles say nothing about a tree: its candidates differ), behind a prior of
  ``tree_prior_weight`` pseudo-requests at the scan's accept length for that tree, halved after
  ``tree_half_life`` requests like the chain counts;
- **exploration**: at each tier (padded batch size) where a tree is eligible and not the choice,
  the tree runs one cycle in ``tree_explore_every`` of the tier's cycles until the tree has
  ``tree_explore_until`` verified requests (over every tier), then one in ``tree_explore_slow``;
  the share of such cycles is reported (``window_control``: ``tree_explore_share``);
- **eligibility**: a tree is a candidate only at the padded batch sizes it has CUDA graphs for
  (stepctl.ControllerInfo.eligible: outside them it would run eager, silently slower).

Rank-safe: every choice is a pure function of batch sizes, cycle counts and accept counts.

This module does not import policy.py (policy imports it): ``TreeRules`` is a mixin that
policy.TreeDecider puts in front of PolicyDecider, which hands it its padding rule and its record
classes (``_pad``, ``_tier_cls``, ``_report_cls``); ``tree_table`` builds policy's ScanTable class,
given as ``table_cls``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_TREE_EXPLORE_EVERY = 32     # one cycle in 32 of a tier while a tree has few verify results
DEFAULT_TREE_EXPLORE_UNTIL = 256    # ... requests verified under the tree (over the server)
DEFAULT_TREE_EXPLORE_SLOW = 256     # then one in 256
DEFAULT_TREE_PRIOR_WEIGHT = 64
DEFAULT_TREE_HALF_LIFE = 2048


def is_tree_cell(c: Mapping[str, Any]) -> bool:
    """A scan cell of a tree state (topk > 1, or a label STEPSxTOPKxTOKENS)."""
    lab = c.get("state")
    if isinstance(lab, str) and lab and not lab.isdigit():
        return True
    k = c.get("topk")
    return isinstance(k, int) and not isinstance(k, bool) and k > 1


def tree_label(c: Mapping[str, Any], where: str) -> str:
    from . import specstate

    lab = c.get("state")
    try:
        if isinstance(lab, str) and lab and not lab.isdigit():
            st = specstate.parse(lab)
        else:
            st = specstate.parse(f"{c.get('steps')}x{c.get('topk')}x{c.get('draft_tokens')}")
    except ValueError as exc:
        raise ValueError(f"{where}: not a tree state ({exc})") from None
    if not st.is_tree:
        raise ValueError(f"{where}: state {st.label} is a chain, not a tree")
    return st.label


def num_field(v: Any, name: str, where: str, *, positive: bool = False) -> float:
    """A scan file's number: finite (and positive when asked), else ValueError naming it (the
    chain table reads its fields with this too)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and abs(v) < 2**53):
        raise ValueError(f"{where}: {name} {v!r:.40} is not a finite number")
    if positive and v <= 0:
        raise ValueError(f"{where}: {name} {v!r} is not positive")
    return float(v)


def tree_table(cells: Sequence[Any], graph_bs: Sequence[int] | None, where: str, table_cls: Any,
               min_cycles: int) -> Any:
    """The trees' costs and prior accept lengths from a scan's tree cells (None: the scan held
    none): a ``table_cls`` (policy.ScanTable) keyed by tree label instead of step count (its
    interpolation as is). A drain cell (not at its level's batch size) of fewer than
    ``min_cycles`` cycles is left out."""
    raw: list[tuple[Any, int, float, float, bool]] = []
    acc: dict[str, list[float]] = {}
    for n, c in enumerate(cells):
        if not isinstance(c, Mapping) or not is_tree_cell(c) or c.get("cycle_ms") is None:
            continue
        cw = f"{where}: cells[{n}]"
        label = tree_label(c, cw)
        bs = c.get("bs")
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ValueError(f"{cw}: bs {bs!r} is not a batch size")
        ms = num_field(c.get("cycle_ms"), "cycle_ms", cw, positive=True)
        k = c.get("cycles")
        w = float(k) if isinstance(k, int) and not isinstance(k, bool) and k > 0 else float(min_cycles)
        main = c.get("level") is None or c.get("bs") == c.get("level")  # policy.is_main
        if not main and w < min_cycles:
            continue  # a thin drain cell (policy._drop_thin's rule, simplified: trees span few sizes)
        raw.append((label, bs, ms, w, c.get("graph") is False))
        al = c.get("accept_len")
        if al is not None:
            al = num_field(al, "accept_len", cw)
            steps = int(label.split("x")[0])
            if not 1.0 <= al <= steps + 1 + 1e-9:
                raise ValueError(f"{cw}: accept_len {al} outside [1, steps + 1] (incl. the bonus)")
            a = acc.setdefault(label, [0.0, 0.0])
            a[0] += al * w
            a[1] += w
    if not raw:
        return None
    missing = sorted({r[0] for r in raw} - set(acc))
    if missing:
        raise ValueError(f"{where}: tree(s) {', '.join(missing)} have no accept_len: no acceptance to start from")
    return table_cls(raw, [], {k: a / w for k, (a, w) in acc.items()}, list(graph_bs) if graph_bs else None, where)


class TreeRules:
    """The tree half of policy.TreeDecider (a mixin in front of PolicyDecider): chains keep
    PolicyDecider's rules, trees are added beside them."""

    _pad: Callable[[int, Sequence[int] | None], int]  # policy.pad_batch
    _tier_cls: Any   # policy._Tier
    _report_cls: Any  # policy._Report

    def __init__(self, table: Any, *, eligible: Callable[[int, Any], bool] | None = None,
                 tree_explore_every: int = DEFAULT_TREE_EXPLORE_EVERY,
                 tree_explore_until: int = DEFAULT_TREE_EXPLORE_UNTIL,
                 tree_explore_slow: int = DEFAULT_TREE_EXPLORE_SLOW,
                 tree_prior_weight: int = DEFAULT_TREE_PRIOR_WEIGHT,
                 tree_half_life: int = DEFAULT_TREE_HALF_LIFE, **knobs: Any) -> None:
        super().__init__(table, **knobs)
        self.trees: Any = getattr(table, "trees", None)
        self.eligible_at = eligible or (lambda level, key: True)
        self.tree_explore_every = max(0, int(tree_explore_every))
        self.tree_explore_until = max(0, int(tree_explore_until))
        self.tree_explore_slow = max(0, int(tree_explore_slow))
        self.tree_prior_weight = max(0, int(tree_prior_weight))
        self.tree_half_life = max(1, int(tree_half_life))
        labels = sorted(self.trees.points) if self.trees else []
        self.tree_tokens = dict.fromkeys(labels, 0)   # tokens (accepted + bonus) of the tree's verified requests
        self.tree_requests = dict.fromkeys(labels, 0)
        self.tree_seen = dict.fromkeys(labels, 0)     # requests ever verified (drives the exploration rate)
        self.tree_cycles = {"explore": 0, "all": 0}
        self._wtree = {"explore": 0, "all": 0}

    @property
    def candidates(self) -> list[Any]:
        return [*self.table.candidates, *(sorted(self.trees.points) if self.trees else [])]

    def describe(self) -> str:
        t = sorted(self.trees.points) if self.trees else []
        return (super().describe() + (f"; trees {t}, each explored 1 cycle in {self.tree_explore_every} per tier "
                                      f"until {self.tree_explore_until} verified requests, then 1 in "
                                      f"{self.tree_explore_slow}" if t else ""))

    # -- what the decision reads

    def tree_accept_len(self, label: str) -> float:
        """Tokens per request per verify of this tree: online counts behind the scan's prior."""
        prior = self.trees.accept_len.get(label, 1.0) if self.trees else 1.0
        w = self.tree_prior_weight
        n = self.tree_requests.get(label, 0)
        return (self.tree_tokens.get(label, 0) + w * prior) / (n + w) if n + w > 0 else prior

    def tree_rates(self, batch_size: int, built: Sequence[Any]) -> dict[str, float]:
        """{tree label: expected tokens per ms per request} of the built trees eligible here."""
        if not self.trees:
            return {}
        level = self._pad(batch_size, self.table.graph_bs)
        out = {}
        for k in built:
            if isinstance(k, str) and k in self.trees.points and self.eligible_at(level, k):
                ms = self.trees.cycle_ms(k, batch_size)
                if ms is not None and ms > 0:
                    out[k] = self.tree_accept_len(k) / ms
        return out

    # -- the Decider protocol

    def choose(self, batch_size: int, current: Any, built: Sequence[Any]) -> Any:
        try:
            return self._choose_any(int(batch_size), current, built)
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang; hold what runs
            self._warn(f"policy decider: {exc!r}; holding the current state")
            chains = [b for b in built if not isinstance(b, str)]
            return current if current in built else (max(chains) if chains else current)

    def _choose_any(self, batch_size: int, current: Any, built: Sequence[Any]) -> Any:
        chains = sorted(b for b in built if not isinstance(b, str))
        costs = self._costs(batch_size, chains)
        trees = self.tree_rates(batch_size, built)
        if not costs and not trees:
            return current if current in built else (max(chains) if chains else current)
        key = self._pad(batch_size, self.table.graph_bs)
        t = self.tiers.setdefault(key, self._tier_cls())
        t.cycles += 1
        r: dict[Any, float] = {}
        if costs:
            _, r = self.best(batch_size, sorted(costs))
        r.update(trees)
        # the best rate; a tie goes to a chain, then to fewer steps (as the chain rule)
        best = max(r, key=lambda s: (r[s], not isinstance(s, str), -_steps(s)))
        self._settle(t, best, r)  # type: ignore[attr-defined]  # PolicyDecider's
        run, explore, tree_explore = t.steps, False, False
        for i, label in enumerate(sorted(trees)):  # each eligible tree, its own phase in the tier's cycles
            if label == t.steps:
                continue
            every = (self.tree_explore_every if self.tree_seen.get(label, 0) < self.tree_explore_until
                     else self.tree_explore_slow)
            if every and (t.cycles + 7 * (i + 1)) % every == 0:
                run, explore, tree_explore = label, True, True
                break
        if not explore and self.explore_every and t.cycles % self.explore_every == 0:
            up = [s for s in sorted(costs) if not isinstance(t.steps, str) and s > t.steps]
            if up:
                run, explore = up[0], True
        for c in (self.tree_cycles, self._wtree):
            c["all"] += 1
            c["explore"] += int(tree_explore)
        self._count(batch_size, run, explore, r.get(run))
        return run

    def observe(self, correct_drafts_per_req: Sequence[int], batch_size: int, steps: Any) -> None:
        if not isinstance(steps, str):
            return super().observe(correct_drafts_per_req, batch_size, steps)
        try:
            self._observe_tree(correct_drafts_per_req, steps)
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang
            self._warn(f"policy decider (observe tree): {exc!r}")
        return None

    def _observe_tree(self, correct: Sequence[int], label: str) -> None:
        if label not in self.tree_requests or not correct:
            return
        depth = int(label.split("x")[0])
        n = len(correct)
        self.tree_requests[label] += n
        self.tree_seen[label] += n
        self.tree_tokens[label] += sum(min(max(int(c), 0), depth) + 1 for c in correct)
        if self.tree_requests[label] >= self.tree_half_life:
            self.tree_requests[label] //= 2
            self.tree_tokens[label] //= 2

    # -- visibility (reporting only)

    def take_window(self) -> dict[str, Any]:
        rep, self._window = self._window, self._report_cls()
        w, self._wtree = self._wtree, {"explore": 0, "all": 0}
        return self._control(rep, w)

    def summary(self) -> dict[str, Any]:
        return self._control(self.total, self.tree_cycles)

    def _control(self, rep: Any, tc: dict[str, int] | None = None) -> dict[str, Any]:
        out = super()._control(rep)
        tc = tc or {"explore": 0, "all": 0}
        out["candidates"] = self.candidates
        out["policy"]["trees"] = {k: {"requests": self.tree_seen[k], "accept_len": round(self.tree_accept_len(k), 4)}
                                  for k in sorted(self.tree_seen)}
        out["policy"]["tree_explore_share"] = round(tc["explore"] / tc["all"], 4) if tc["all"] else None
        out["policy"]["tree_explore_def"] = ("decode cycles that ran a tree only to count its acceptance (not the "
                                             "tier's choice), of all decode cycles")
        return out


def _steps(key: Any) -> int:
    return int(key.split("x")[0]) if isinstance(key, str) else int(key)
