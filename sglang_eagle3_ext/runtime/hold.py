"""The hold schedule decider (``SGLANG_EAGLE3_HOLD=N``): every load level runs blocks of N decode
cycles, each block held at one candidate step count, rotated through the candidates.

A pure function of per-level decode-cycle counts: level = the batch size padded to the next
CUDA-graph size (as SGLang's adaptive routing pads it), so every load level rotates through every
candidate on its own count, and two TP ranks fed the same batch sizes choose the same steps. The
rotation runs forward then backward (4 3 2 1 0, 0 1 2 3 4, ...): a linear drift over time (context
growth, a slowly changing batch) lands equally on every candidate over each pair of rounds, and the
turn costs no switch. Stdlib only (runs inside SGLang). docs/plugin.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from . import settings


def slot(count: int, block: int, order: Sequence[int]) -> tuple[int, int]:
    """(block id, steps) of the cycle numbered ``count`` (0-based) at one level."""
    b = count // block
    n = len(order)
    rnd, pos = divmod(b, n)
    return b, order[pos if rnd % 2 == 0 else n - 1 - pos]


class HoldDecider:
    name = "hold"

    def __init__(self, block: int, candidates: Sequence[int],
                 level_of: Callable[[int], int] | None = None) -> None:
        if block < 1:
            raise ValueError("hold block must be >= 1 cycle")
        if not candidates:
            raise ValueError("hold needs at least one candidate step count")
        self.block_len = int(block)
        self.candidates = tuple(int(c) for c in candidates)
        self.level_of = level_of or (lambda bs: bs)
        self.counts: dict[int, int] = {}  # level -> decode cycles chosen at that level
        self.block: int | None = None  # block id of the last choice (its level's counter)
        self.observed = 0

    def choose(self, batch_size: int, current: int, built: Sequence[int]) -> int:
        level = self.level_of(batch_size)
        c = self.counts.get(level, 0)
        self.counts[level] = c + 1
        self.block, steps = slot(c, self.block_len, self.candidates)
        # a scheduled step count with no runtime state (removed after init_states built them all)
        # is returned as is, never swapped for the current one: stepctl.activate_hook logs it once
        # and hands back to SGLang's own rule, which fails loud where its choice has no state
        # (0.5.23 adaptive_runtime_state.py _activate: "Missing adaptive runtime state")
        return steps

    def observe(self, correct_drafts_per_req: Sequence[int], batch_size: int, steps: int) -> None:
        self.observed += 1  # the schedule does not depend on acceptance

    def describe(self) -> str:
        return f"blocks of {self.block_len} cycles over steps {', '.join(map(str, self.candidates))} per level"


def candidates_for(built: Sequence[int], wanted: Sequence[int] | None) -> tuple[int, ...]:
    """The held candidates: ``wanted`` in its order (each must be built), else every built state,
    largest first (the server starts at the largest: block 0 needs no switch)."""
    if not wanted:
        return tuple(sorted(built, reverse=True))
    missing = [s for s in wanted if s not in built]
    if missing:
        raise ValueError(f"{settings.HOLD_STEPS.name}: steps {', '.join(map(str, missing))} have no "
                         f"adaptive state (built: {', '.join(map(str, sorted(built)))}); list them in the "
                         "adaptive config's candidate_steps")
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
    return HoldDecider(block, cands, getattr(info, "level_of", None))
