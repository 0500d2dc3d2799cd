"""The wiring construction (`tiny --trained-on 2,16,29`): a draft that is right only when SGLang
captures exactly the layers it was "trained on" (docs/reference/tiny.md, "wiring").

Residual-stream layout of the target (H = hidden, A = H/4):
- dims [0, A-1): token code, +-1 (the target's lm_head and the draft read only these);
- dim A-1: constant +1 (the "bias" dim: drives the MLP gates to a constant);
- per trained layer L a block of m = 3A/16 dims, written by layer L's MLP as kappa * S_L e
  (S_L a signed selection of m token dims) and erased by layer L+1's MLP; zero elsewhere.

Every embedding row has RMS 1/2, so layer L's MLP input (post-norm) is exactly 2 e; with the block
the RMS is exactly 1 (A + m*kappa^2 = 4A = H), so layer L+1's norm weight 2 gives it 2 e as well.
The MLP gate reads the bias dim: pre-activation 32, silu(32) == 32.0 in fp32, so the MLP is the
linear map 32 * up. kappa = 4 and every factor are powers of two: write and erase cancel exactly
in bf16. The draft's fc reads, for aux slot i, the block of its trained layer and the matching
token dims with opposite signs: 0 when the right layer is captured, -beta * M_i e (a large
token-dependent vector that swamps the draft's readout) when a neighbour is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError
from .shapes import Shape
from .targets import writer_mlp_prefix, writer_mlp_width

KAPPA = 4.0
GATE = 32.0  # silu(32) rounds to 32.0 in float32: the MLP is exactly linear
BETA = 4.0


@dataclass
class Plan:
    trained: list[int]  # our convention, sorted (= capture order = fc slot order)
    hidden: int
    active: int  # A
    block: int  # m
    starts: dict[int, int] = field(default_factory=dict)
    src: dict[int, list[int]] = field(default_factory=dict)  # token dim per block dim
    sign: dict[int, list[float]] = field(default_factory=dict)

    @property
    def token_dims(self) -> int:
        return self.active - 1

    @property
    def bias_dim(self) -> int:
        return self.active - 1

    def to_dict(self) -> dict[str, Any]:
        return {"token_dims": self.token_dims, "bias_dim": self.bias_dim, "block": self.block,
                "kappa": KAPPA, "gate": GATE, "beta": BETA,
                "blocks": {str(k): [v, v + self.block] for k, v in self.starts.items()}}


def plan(s: Shape, trained: list[Any], seed: int) -> Plan:
    """Check the trained layers against the shape and lay out the blocks (UserError exit 2)."""
    if any(not isinstance(x, int) for x in trained):
        raise UserError("--trained-on: the wiring construction takes decoder-layer outputs only "
                        "(no 'emb')", exit_code=2)
    layers = sorted(trained)
    if not layers:
        raise UserError("--trained-on needs at least one layer", exit_code=2)
    if layers[-1] > s.layers - 2:
        raise UserError(f"--trained-on {layers[-1]}: layer L+1 erases the signal, so L must be at most "
                        f"{s.layers - 2} on a {s.layers}-layer target", exit_code=2)
    for a, b in zip(layers, layers[1:], strict=False):
        if b - a < 2:
            raise UserError(f"--trained-on {a},{b}: trained layers must be at least 2 apart (layer "
                            "L+1 erases what layer L wrote)", exit_code=2)
    h = s.hidden
    if h % 64:
        raise UserError(f"the wiring construction needs hidden % 64 == 0 (got {h})", exit_code=2)
    active = h // 4
    m = 3 * active // 16
    if active + len(layers) * m > h:
        raise UserError(f"--trained-on: {len(layers)} layers need {active + len(layers) * m} dims, "
                        f"hidden is {h} (at most {(h - active) // m} trained layers)", exit_code=2)
    for L in layers:
        for i in (L, L + 1):
            if writer_mlp_width(s, i) < m:
                raise UserError(f"layer {i}'s MLP is {writer_mlp_width(s, i)} wide; the wiring needs "
                                f"{m}", exit_code=2)
    p = Plan(layers, h, active, m)
    rng = random.Random(seed * 104729 + 7)
    for n, L in enumerate(layers):
        p.starts[L] = active + n * m
        p.src[L] = rng.sample(range(active - 1), m)
        p.sign[L] = [rng.choice((-1.0, 1.0)) for _ in range(m)]
    return p


def embedding_layout(p: Plan, embed: Any) -> None:
    """Token code on [0, A-1), +1 on the bias dim, 0 on the blocks and above (in place)."""
    embed[:, p.active - 1] = 1
    embed[:, p.active:] = 0


def modify_layer(s: Shape, p: Plan, i: int, w: dict[str, Any]) -> None:
    """Layer i writes (i = L) or erases (i = L+1) the block of trained layer L."""
    import torch

    for L in p.trained:
        if i not in (L, L + 1):
            continue
        sign = 1.0 if i == L else -1.0
        pre = writer_mlp_prefix(s, i)
        gate, up, down = (w[pre + n + "_proj.weight"] for n in ("gate", "up", "down"))
        dev = gate.device
        m, start = p.block, p.starts[L]
        rows = torch.arange(m, device=dev)
        gate[:m] = 0
        # input (post-norm) is exactly 2 on the bias dim and 2 e on the token dims
        gate[rows, p.bias_dim] = GATE / 2
        up[:m] = 0
        up[rows, torch.tensor(p.src[L], device=dev)] = torch.tensor(p.sign[L], device=dev).to(up.dtype) * sign
        # intermediate = GATE * 2 * sign * e_src; down writes kappa * (that) / (2 GATE)
        down.zero_()
        down[start + rows, rows] = KAPPA / (2 * GATE)
        if i == L + 1:  # input RMS is 1 here (block present): norm weight 2 makes it 2 e again
            w[f"model.layers.{i}.post_attention_layernorm.weight"].fill_(2.0)


def draft_fc(p: Plan, fc: Any, seed_gen: Any) -> None:
    """fc [H, n*H]: slot i = beta * M_i (block_{L_i} S_i^-1 / kappa - token dims), M_i +-1."""
    import torch

    h, m = p.hidden, p.block
    dev = fc.device
    fc.zero_()
    for slot, L in enumerate(p.trained):
        mi = seed_gen.signs(h, m).to(fc.dtype) * BETA
        src = torch.tensor(p.src[L], device=dev)
        sign = torch.tensor(p.sign[L], device=dev).to(fc.dtype)
        base = slot * h
        fc[:, base + src] = -mi
        fc[:, base + p.starts[L] + torch.arange(m, device=dev)] = mi * sign / KAPPA


def config_ids(s: Shape, trained: list[int], version: str) -> tuple[list[int], list[int]]:
    """Draft config ids for a wiring pair whose *default* capture is a neighbour (the silent bug),
    and the layers SGLang ``version`` captures with them (ours).

    Tries the other convention's spelling first: for llama (+1 rule) the HF/loop indices L+1
    (captures outputs L+1), for DeepSeek 0.5.13+ (raw ids) our own L (captures outputs L-1); when
    DeepSeek's "first id 1" heuristic makes those right, L+2 (raw: outputs L+1)."""
    from ..runtime import layers as lay

    fam = lay.FAMILIES["llama" if s.arch == "llama" else "deepseek_v2"]
    want = sorted(lay.to_loop(x) for x in trained)
    for shift in (0, 1, -1, 2):  # first one whose capture is wrong but complete
        ids = [L + shift for L in trained]
        loops = lay.config_to_loop(fam, version, ids, s.layers)
        if sorted(loops) != want and all(1 <= x <= s.layers - 1 for x in loops) \
                and len(set(loops)) == len(loops):
            return ids, [lay.from_loop(x) for x in sorted(loops)]
    ids = lay.ours_to_config(fam, version, trained, s.layers)
    return ids, list(trained)
