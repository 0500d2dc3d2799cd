"""The hold schedule decider (``SGLANG_EAGLE3_HOLD=N``): every load level runs blocks of about N
decode cycles, each block held at one candidate step count.

A pure function of per-level decode-cycle counts: level = the batch size padded to the next
CUDA-graph size (as SGLang's adaptive routing pads it), so every load level goes through every
candidate on its own count, and two TP ranks fed the same batch sizes choose the same steps.

Each round holds every candidate once, in an order shuffled per (level, round), and each block
lasts between N/2 and 3N/2 cycles (mean N), both drawn from a fixed integer hash of (level, round
or block): no random module, no wall time, no seed to share, so every rank draws the same. Why
not a fixed rotation: on one repeated text at temperature 0 (every request the same prompt) a
fixed rotation with a fixed block length locks to the request's length, and each step count's
blocks land on the same stretches of every request; its accept length is then that stretch's,
not the text's (on the H200 up to 7 % off a separately started server, docs/guide/scan.md). A shuffled
order and block lengths that do not divide any request length spread every step count over the
whole text. Stdlib only (runs inside SGLang). docs/reference/plugin.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from . import settings, specstate
from .specstate import Key

_M64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finaliser: a fixed, well-mixed 64-bit hash of an integer (same on every rank,
    every Python, every platform)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _h(level: int, what: int, n: int, i: int = 0) -> int:
    return mix64(mix64(mix64(level & _M64) ^ what) ^ (n & _M64) ^ (i << 48))


def round_order(level: int, rnd: int, candidates: Sequence[Key]) -> tuple[Key, ...]:
    """Round ``rnd``'s order of the candidates at ``level``: a Fisher-Yates shuffle by the hash."""
    o = list(candidates)
    for i in range(len(o) - 1, 0, -1):
        j = _h(level, 1, rnd, i) % (i + 1)
        o[i], o[j] = o[j], o[i]
    return tuple(o)


def block_length(level: int, block_id: int, block: int) -> int:
    """Cycles of block ``block_id`` at ``level``: uniform over [ceil(N/2), floor(3N/2)], mean N."""
    lo, hi = (block + 1) // 2, (3 * block) // 2
    return lo + _h(level, 2, block_id) % (hi - lo + 1)


class LevelSchedule:
    """One level's blocks, cycle by cycle: ``next()`` -> (block id, state key)."""

    __slots__ = ("level", "block", "candidates", "block_id", "left", "order", "steps")

    def __init__(self, level: int, block: int, candidates: Sequence[Key]) -> None:
        self.level, self.block, self.candidates = level, block, tuple(candidates)
        self.block_id, self.left, self.order, self.steps = -1, 0, (), self.candidates[0]

    def next(self) -> tuple[int, Key]:
        if self.left == 0:
            self.block_id += 1
            rnd, pos = divmod(self.block_id, len(self.candidates))
            if pos == 0:
                self.order = round_order(self.level, rnd, self.candidates)
            self.steps = self.order[pos]
            self.left = block_length(self.level, self.block_id, self.block)
        self.left -= 1
        return self.block_id, self.steps


def slot(count: int, block: int, order: Sequence[Key], level: int = 1) -> tuple[int, Key]:
    """(block id, steps) of the cycle numbered ``count`` (0-based) at ``level``: the pure function
    the decider computes incrementally (tests, documents)."""
    s = LevelSchedule(level, block, order)
    for _ in range(count):
        s.next()
    return s.next()


class HoldDecider:
    name = "hold"

    def __init__(self, block: int, candidates: Sequence[Key],
                 level_of: Callable[[int], int] | None = None,
                 eligible: Callable[[int, Key], bool] | None = None) -> None:
        if block < 1:
            raise ValueError("hold block must be >= 1 cycle")
        if not candidates:
            raise ValueError("hold needs at least one candidate step count")
        self.block_len = int(block)
        self.candidates = tuple(c if isinstance(c, str) else int(c) for c in candidates)
        self.level_of = level_of or (lambda bs: bs)
        # a tree is held only at the levels it has CUDA graphs for (stepctl.ControllerInfo.eligible)
        self.eligible = eligible or (lambda level, key: True)
        self.levels: dict[int, LevelSchedule] = {}  # level -> its schedule (decode cycles chosen there)
        self.block: int | None = None  # block id of the last choice (its level's counter)
        self.observed = 0

    def choose(self, batch_size: int, current: Key, built: Sequence[Key]) -> Key:
        level = self.level_of(batch_size)
        sch = self.levels.get(level)
        if sch is None:
            here = tuple(c for c in self.candidates if self.eligible(level, c)) or self.chains()
            sch = self.levels[level] = LevelSchedule(level, self.block_len, here)
        self.block, steps = sch.next()
        # a scheduled step count with no runtime state (removed after init_states built them all)
        # is returned as is, never swapped for the current one: stepctl.activate_hook logs it once
        # and hands back to SGLang's own rule, which fails loud where its choice has no state
        # (0.5.23 adaptive_runtime_state.py _activate: "Missing adaptive runtime state")
        return steps

    def chains(self) -> tuple[Key, ...]:
        """The chain candidates (a level no held tree serves holds these)."""
        return tuple(c for c in self.candidates if not isinstance(c, str)) or self.candidates[:1]

    def observe(self, correct_drafts_per_req: Sequence[int], batch_size: int, steps: Key) -> None:
        self.observed += 1  # the schedule does not depend on acceptance

    def describe(self) -> str:
        return (f"blocks of {(self.block_len + 1) // 2}-{(3 * self.block_len) // 2} cycles (mean "
                f"{self.block_len}) over steps {', '.join(map(str, self.candidates))}, each round in "
                "an order shuffled per level")


def candidates_for(built: Sequence[Key], wanted: Sequence[Key] | None) -> tuple[Key, ...]:
    """The held candidates: ``wanted`` in its order (each must be built), else every built state,
    chains largest first, then trees (the set matters; each round's order is shuffled)."""
    if not wanted:
        keys = specstate.sort_keys(built)
        chains = [k for k in keys if not isinstance(k, str)]
        return tuple(sorted(chains, reverse=True)) + tuple(k for k in keys if isinstance(k, str))
    missing = [s for s in wanted if s not in built]
    if missing:
        what = "states" if any(isinstance(m, str) for m in missing) else "steps"
        raise ValueError(f"{settings.HOLD_STEPS.name}: {what} {', '.join(map(str, missing))} have no "
                         f"adaptive state (built: {', '.join(map(str, specstate.sort_keys(built)))}); list "
                         f"chains in the adaptive config's candidate_steps and trees in "
                         f"{settings.TREES.name}")
    return tuple(wanted)


def from_settings(info: object, environ: Mapping[str, str] | None = None) -> HoldDecider:
    """From SGLANG_EAGLE3_HOLD / _HOLD_STEPS and the live controller (``stepctl.ControllerInfo``)."""
    block, problem = settings.HOLD.read(environ)
    if problem or not block:
        raise ValueError(problem or f"{settings.HOLD.name} is not set")
    wanted, problem = settings.HOLD_STEPS.read(environ)
    if problem:
        raise ValueError(problem)
    built = tuple(getattr(info, "built", ()))
    if not built:
        raise ValueError("the adaptive controller built no runtime state")
    cands = candidates_for(built, wanted)
    return HoldDecider(block, cands, getattr(info, "level_of", None), getattr(info, "eligible", None))
