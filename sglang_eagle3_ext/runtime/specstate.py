"""Speculative states: a state is (steps, topk, draft tokens), not a step count.

Spelling, everywhere (flags, env, records, scan cells, policy files): a chain is its step count
(``5`` = 5 steps, topk 1, 6 draft tokens: exactly what every chain-only file already says), a tree
is ``STEPSxTOPKxTOKENS`` (``5x4x21`` = 5 steps, topk 4, 21 draft tokens), the order of SGLang's own
flags (``--speculative-num-steps / -eagle-topk / -num-draft-tokens``) and of ``sweep``'s
``matrix.trees`` items. A tree held in one server also names the batch sizes it gets CUDA graphs
for: ``5x4x21@1-16`` (none: every captured size).

Inside SGLang the adaptive controller keys its states by ``int`` steps; tree states are registered
beside them under their label (``"5x4x21"``), so SGLang's own EMA, which only asks for ints, can
never pick a tree. Stdlib only: this module runs inside SGLang processes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

Key = int | str  # chain: steps (SGLang's own key); tree: its label "5x4x21"

_TREE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")
MAX_TOPK = 16  # SGLang's tree kernels: topk x topk candidates per step stay small
MAX_TOKENS = 64  # draft tokens per request a verify carries (SGLang's trees use <= 64)


class State(NamedTuple):
    steps: int
    topk: int
    tokens: int  # draft tokens per request verified (n)

    @property
    def is_tree(self) -> bool:
        return self.topk > 1

    @property
    def key(self) -> Key:
        return self.label if self.is_tree else self.steps

    @property
    def label(self) -> str:
        return f"{self.steps}x{self.topk}x{self.tokens}" if self.is_tree else str(self.steps)

    def describe(self) -> str:
        return (f"tree {self.label} ({self.steps} steps, topk {self.topk}, {self.tokens} draft tokens)"
                if self.is_tree else f"chain {self.steps}")

    @property
    def draft_slots(self) -> int:
        """KV slots one request's draft writes per cycle (SGLang: topk x steps)."""
        return self.topk * self.steps

    @property
    def alloc_per_decode(self) -> int:
        """SGLang's ``get_alloc_len_per_decode`` at page size 1: max(topk x steps, draft tokens)."""
        return max(self.draft_slots, self.tokens)


def chain(steps: int) -> State:
    return State(int(steps), 1, int(steps) + 1)


def check(s: State) -> State:
    """The state itself must be one SGLang can run; ValueError with the reason otherwise."""
    if s.steps < 0 or (s.topk > 1 and s.steps < 1):  # chain 0: SGLang's 0-step state (0.5.16+)
        raise ValueError(f"{s.label}: a tree needs at least 1 step, a chain at least 0")
    if s.topk < 1 or s.topk > MAX_TOPK:
        raise ValueError(f"{s.label}: topk must be 1..{MAX_TOPK}")
    if s.topk == 1 and s.tokens != s.steps + 1:
        raise ValueError(f"{s.steps}x1x{s.tokens}: a chain of {s.steps} steps verifies {s.steps + 1} tokens")
    if s.topk > 1:
        if s.tokens < 2 or s.tokens > MAX_TOKENS:
            raise ValueError(f"{s.label}: draft tokens must be 2..{MAX_TOKENS}")
        # the draft tree holds at most topk + (steps-1) x topk^2 candidates (SGLang's
        # organize_draft_results keeps the best n-1 of them; bench_speculative.py skips the rest)
        most = s.topk + (s.steps - 1) * s.topk * s.topk
        if s.tokens - 1 > most:
            raise ValueError(f"{s.label}: {s.tokens - 1} draft tokens beyond the root, but {s.steps} steps "
                             f"of topk {s.topk} draft at most {most}")
    return s


def parse(text: str | int) -> State:
    """``5`` -> chain 5; ``5x4x21`` -> the tree; ``5x1x6`` -> chain 5. ValueError with the reason."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a state")
    if isinstance(text, int):
        return check(chain(text))
    t = str(text).strip()
    if t.isdigit():
        return check(chain(int(t)))
    m = _TREE.match(t)
    if not m:
        raise ValueError(f"{text!r} is not a state: write a chain as its steps (5) or a tree as "
                         "STEPSxTOPKxTOKENS (5x4x21)")
    return check(State(int(m[1]), int(m[2]), int(m[3])))


def of_key(key: Key) -> State:
    """The state a controller key names (int steps or a tree label)."""
    return parse(key)


def key_sort(key: Key) -> tuple[int, int, int]:
    """Chains first by steps, then trees by (steps, topk, tokens): one stable order for tables."""
    s = of_key(key)
    return (0 if not s.is_tree else 1, s.steps, s.topk * 100 + s.tokens)


def sort_keys(keys: Iterable[Key]) -> list[Key]:
    return sorted(keys, key=key_sort)


class TreeSpec(NamedTuple):
    state: State
    lo: int  # the batch sizes the tree gets graphs for and may be chosen at (inclusive)
    hi: int

    @property
    def text(self) -> str:
        return self.state.label if self.hi >= ANY_BS else f"{self.state.label}@{self.lo}-{self.hi}"

    def serves(self, batch_size: int) -> bool:
        return self.lo <= batch_size <= self.hi


ANY_BS = 1 << 30  # no @range: every batch size


def _bs_range(text: str, where: str) -> tuple[int, int]:
    a, dash, b = text.strip().partition("-")
    if not dash:
        b = a
    if not (a.strip().isdigit() and b.strip().isdigit()):
        raise ValueError(f"{where}: batch sizes {text!r} are not N-M (e.g. @1-16) or N")
    lo, hi = int(a), int(b)
    if lo < 1 or hi < lo:
        raise ValueError(f"{where}: batch sizes {text!r} must be 1 <= N <= M")
    return lo, hi


def parse_trees(text: str) -> list[TreeSpec]:
    """``5x4x21@1-16,4x3x8@1-4`` (``,`` or ``;`` between trees) -> the trees held beside the
    chains, each with the batch sizes it gets CUDA graphs for. ValueError with the reason."""
    out: list[TreeSpec] = []
    seen: set[str] = set()
    for item in (p.strip() for p in re.split(r"[;,]", text or "")):
        if not item:
            continue
        head, at, rng = item.partition("@")
        st = parse(head)
        if not st.is_tree:
            raise ValueError(f"{item!r}: a tree has topk > 1 (chains are the adaptive config's "
                             "candidate steps)")
        if st.label in seen:
            raise ValueError(f"{st.label} is listed twice")
        seen.add(st.label)
        lo, hi = _bs_range(rng, st.label) if at else (1, ANY_BS)
        out.append(TreeSpec(st, lo, hi))
    return out


def format_trees(specs: Sequence[TreeSpec]) -> str:
    """The inverse of ``parse_trees`` (what launch writes into the environment)."""
    return ",".join(t.text for t in specs)


def graph_sizes(spec: TreeSpec, captured: Sequence[int] | None) -> list[int] | None:
    """The CUDA-graph batch sizes a tree state is built with: the captured sizes inside its range
    (a batch pads up to the next captured size, and the tree is chosen only where that padded size
    is inside the range). None: graphs are off. ValueError: no captured size is inside."""
    if captured is None:
        return None
    inside = [b for b in sorted(int(x) for x in captured) if spec.lo <= b <= spec.hi]
    if not inside:
        raise ValueError(f"tree {spec.text}: no captured CUDA-graph batch size is inside its range "
                         f"(captured: {sorted(int(x) for x in captured)})")
    return inside


class Envelope(NamedTuple):
    """What is shared across states and must be sized for the largest (SGLang sizes it from the
    launch chain): every value a max over the held states."""

    max_topk: int
    max_tokens: int
    alloc_per_decode: int
    draft_slots: int


def envelope(states: Iterable[State]) -> Envelope:
    ss = list(states)
    if not ss:
        raise ValueError("no state")
    return Envelope(max(s.topk for s in ss), max(s.tokens for s in ss),
                    max(s.alloc_per_decode for s in ss), max(s.draft_slots for s in ss))
