"""The sizes a speculative configuration may have, wherever one is read (flags, presets, sweep
files, scan --steps, adaptive configs, probe records, scan results, the policy's table).

Far above anything that runs (SGLang's default adaptive tiers stop at 7 steps; the largest tree
measured here is 5 steps x topk 8, 25 draft tokens), low enough that a typo such as
``--steps 0-9999999999`` is one line before a list of ten billion is built, and that a
``--speculative-num-steps 1000000`` never reaches SGLang. Stdlib only (read inside SGLang).
"""

from __future__ import annotations

MAX_STEPS = 64            # speculative steps (one runtime state each in a scan)
MAX_TOPK = 64             # EAGLE topk
MAX_DRAFT_TOKENS = 4096   # verified tokens per request (a tree of steps x topk + 1 at most)
MAX_BATCH = 1 << 20       # a batch size / concurrency
MAX_COUNT = 2**53         # a count beyond a float's exact integers is garbage (and overflows sums)


def steps_error(v: object, name: str = "steps") -> str | None:
    """Why ``v`` is not a step count 0..MAX_STEPS, or None."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEPS:
        return None
    return f"{name} {v!r:.40} is not a step count 0..{MAX_STEPS} (SGLang's default tiers stop at 7)"
