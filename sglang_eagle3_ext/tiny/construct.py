"""Pieces of the constructions that do not depend on the architecture (docs/tiny.md).

- ``partial_maps``: f (the target's next token) and g (the draft's) over the tokenizer's ids;
- ``readout``: a linear layer whose argmax over given inputs is given labels, by a margin in bf16;
- ``simulate_accept``: greedy speculative decoding with the maps, for the expected accept length.
"""

from __future__ import annotations

import random
from typing import Any

from ..errors import UserError
from .shapes import HOT_CYCLE, TOKENIZER_VOCAB

READOUT_MARGIN = 48.0


def rms_normed(x: Any, eps: float = 1e-6) -> Any:
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def readout(inputs: Any, labels: Any, rows: int) -> Any:
    """Linear readout W [rows, H] with argmax(inputs @ W.T) == labels for every input, by margin.

    Start from the class sums (each row = sum of its inputs), then perceptron corrections until
    every input wins by the margin, over every other row and over 0 (rows outside ``rows`` are
    zero in the full matrix), evaluated in bfloat16 (what the GPU runs). The margin is
    READOUT_MARGIN, or 5% of the typical winning logit when that is larger (at hidden 4096 a logit
    of ~4096 is rounded to multiples of 32 in bf16, so a fixed 48 could flip under another GEMM's
    summation order). Runs on the inputs' device.
    """
    import torch

    inputs = inputs.float()
    labels = labels.to(inputs.device)
    w = torch.zeros(rows, inputs.shape[1], device=inputs.device)
    w.index_add_(0, labels, inputs)
    idx = torch.arange(len(labels), device=inputs.device)
    own0 = (inputs.bfloat16() @ w.bfloat16().T).float()[idx, labels]
    margin = max(READOUT_MARGIN, 0.05 * float(own0.median()))
    for _ in range(200):
        logits = (inputs.bfloat16() @ w.bfloat16().T).float()
        own = logits[idx, labels].clone()
        logits[idx, labels] = -float("inf")
        best_other, other = logits.max(dim=1)
        bad = (own - best_other.clamp(min=0.0)) < margin
        if not bad.any():
            return w
        w.index_add_(0, labels[bad], inputs[bad] * 0.25)
        w.index_add_(0, other[bad], -inputs[bad] * 0.25)
    raise UserError("tiny: could not build a separable readout (try another --seed)")


def cycle_len(draft_vocab: int) -> int:
    return min(draft_vocab, HOT_CYCLE)


def partial_maps(p: float, seed: int, draft_vocab: int) -> tuple[list[int], list[int], list[int]]:
    """f (target next token), g (draft next token) over the tokenizer's ids, and the agreement set.

    f on the hot cycle [0, n) is one random cycle, so generation visits every one of those ids;
    the other ids map into it. g equals f on a random p-fraction of ids, else a different cycle id.
    f depends only on the seed (drawn first), so drafts for several p share one target.
    """
    n = cycle_len(draft_vocab)
    vocab = TOKENIZER_VOCAB
    rng = random.Random(seed * 7919 + 17)
    order = list(range(n))
    rng.shuffle(order)
    f = [0] * vocab
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        f[a] = b
    for x in range(n, vocab):
        f[x] = rng.randrange(n)
    n_agree = round(p * vocab)
    ids = list(range(vocab))
    rng.shuffle(ids)
    agree = sorted(ids[:n_agree])
    agree_set = set(agree)
    g = []
    for x in range(vocab):
        if x in agree_set:
            g.append(f[x])
        else:
            y = rng.randrange(n - 1)
            g.append(y if y < f[x] else y + 1)  # any cycle id except f[x]
    return f, g, agree


def simulate_accept(f: list[int], g: list[int], steps: int, cycles: int = 4000,
                    start: int = 0) -> tuple[float, list[float]]:
    """Greedy speculative decoding with maps f (target) and g (draft, chained), topk 1.

    Returns (accept length incl. bonus, per-position conditional acceptance rates).
    """
    x = start
    total = 0
    reached = [0] * steps
    accepted = [0] * steps
    for _ in range(cycles):
        d, t = x, x
        n = 0
        for k in range(steps):
            d = g[d]
            t_next = f[t]
            reached[k] += 1
            if d != t_next:
                t = t_next
                break
            accepted[k] += 1
            n += 1
            t = t_next
        else:
            t = f[t]  # bonus token after all drafts accepted
        total += n + 1
        x = t
    rates = [a / r if r else 0.0 for a, r in zip(accepted, reached, strict=True)]
    return total / cycles, rates


def partial_info(f: list[int], g: list[int], draft_vocab: int) -> dict[str, Any]:
    """tiny.json fields of one partial draft: agreement and expected accept length per steps."""
    n = cycle_len(draft_vocab)
    info: dict[str, Any] = {
        "agree_fraction": sum(a == b for a, b in zip(f, g, strict=True)) / len(f),
        "agree_fraction_hot": sum(f[x] == g[x] for x in range(n)) / n,
        "expected_accept_len": {}, "per_position": {}}
    for s in range(1, 9):
        alen, rates = simulate_accept(f, g, s)
        info["expected_accept_len"][str(s)] = round(alen, 4)
        info["per_position"][str(s)] = [round(r, 4) for r in rates]
    return info
