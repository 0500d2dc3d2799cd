"""Pieces of the constructions that do not depend on the architecture (docs/reference/tiny.md).

- ``partial_maps``: f (the target's next token) and g (the draft's) over the tokenizer's ids;
- ``readout``: a linear layer whose argmax over given inputs is given labels, by a margin in bf16;
- ``simulate_accept``: greedy speculative decoding with the maps, for the expected accept length;
- ``simulate_request``: one request as SGLang serves and counts it (a walk segment, see below).
"""

from __future__ import annotations

import random
from typing import Any

from ..runtime.errors import UserError
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


def chain_verify(f: list[int], g: list[int], x: int, steps: int) -> tuple[int, int]:
    """One greedy topk-1 verify from token ``x``: (drafts accepted, the bonus token = the next
    verify's start). The draft chains on its own guesses; the target on its tokens."""
    d = t = x
    for n in range(steps):
        d, t = g[d], f[t]
        if d != t:
            return n, t  # t: the target's token here, the bonus
    return steps, f[t]  # every draft right: the bonus after them


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
        n, x = chain_verify(f, g, x, steps)
        count_verify(n, steps, reached, accepted)
        total += n + 1
    rates = [a / r if r else 0.0 for a, r in zip(accepted, reached, strict=True)]
    return total / cycles, rates


def count_verify(n: int, steps: int, reached: list[int], accepted: list[int]) -> None:
    """A verify that accepted n drafts reached depths 0..min(n, steps - 1), accepted 0..n-1."""
    for k in range(min(n + 1, steps)):
        reached[k] += 1
    for k in range(n):
        accepted[k] += 1


REQUEST_TOKENS = (256, 1000)  # request lengths tiny.json gives the chat expectation for (bench: 1000)


def simulate_request(f: list[int], g: list[int], steps: int, last_prompt_token: int,
                     max_tokens: int) -> tuple[float, list[float], list[int]]:
    """One greedy request, topk 1, counted the way SGLang counts it.

    The target's next token depends on the last token only, so a request is one fixed segment of
    the walk on the hot cycle: the prefill emits f(last prompt token), then each verify emits its
    accepted drafts + the bonus, the last one cut at ``max_tokens``. Accept length = completion
    tokens / verify calls (SGLang's spec_verify_ct). Returns (accept length, per-position
    conditional rates, histogram of accepted drafts per verify).
    """
    x = f[last_prompt_token]
    done, verifies = 1, 0
    hist = [0] * (steps + 1)
    reached, accepted = [0] * steps, [0] * steps
    while done < max_tokens:
        n, x = chain_verify(f, g, x, steps)
        count_verify(n, steps, reached, accepted)
        hist[n] += 1
        verifies += 1
        done += n + 1
    rates = [a / r if r else 0.0 for a, r in zip(accepted, reached, strict=True)]
    return max_tokens / verifies, rates, hist


def request_spread(f: list[int], g: list[int], steps: int, max_tokens: int,
                   draft_vocab: int) -> tuple[float, float]:
    """(min, max) accept length of one request over every start on the hot cycle."""
    vals = []
    for x in range(cycle_len(draft_vocab)):
        # a prompt whose last token is t starts the walk at f(t); start at x itself
        vals.append(simulate_request(f, g, steps, f.index(x), max_tokens)[0])
    return min(vals), max(vals)


def partial_info(f: list[int], g: list[int], draft_vocab: int,
                 chat_last_token: int | None = None) -> dict[str, Any]:
    """tiny.json fields of one partial draft: agreement and expected accept length per steps.

    ``expected_accept_len`` is the average over the whole hot cycle (many requests from many
    different prompt endings). With ``chat_last_token`` (the last id of the chat template's
    generation prompt, the same for every chat prompt) also what one chat request of each
    REQUEST_TOKENS length measures: every chat request walks the same segment of the cycle.
    """
    n = cycle_len(draft_vocab)
    info: dict[str, Any] = {
        "agree_fraction": sum(a == b for a, b in zip(f, g, strict=True)) / len(f),
        "agree_fraction_hot": sum(f[x] == g[x] for x in range(n)) / n,
        "expected_accept_len": {}, "per_position": {}}
    for s in range(1, 9):
        alen, rates = simulate_accept(f, g, s)
        info["expected_accept_len"][str(s)] = round(alen, 4)
        info["per_position"][str(s)] = [round(r, 4) for r in rates]
    if chat_last_token is not None:
        info["chat_last_token"] = chat_last_token
        info["expected_accept_len_chat"] = {}
        info["per_position_chat"] = {}
        for tokens in REQUEST_TOKENS:
            alen_by, pos_by = {}, {}
            for s in range(1, 9):
                alen, rates, _ = simulate_request(f, g, s, chat_last_token, tokens)
                alen_by[str(s)] = round(alen, 4)
                pos_by[str(s)] = [round(r, 4) for r in rates]
            info["expected_accept_len_chat"][str(tokens)] = alen_by
            info["per_position_chat"][str(tokens)] = pos_by
        # where one request of REQUEST_TOKENS[0] tokens can land, by its prompt's last token
        info["request_range"] = {str(REQUEST_TOKENS[0]): {
            str(s): [round(v, 4) for v in request_spread(f, g, s, REQUEST_TOKENS[0], draft_vocab)]
            for s in range(1, 9)}}
    return info
