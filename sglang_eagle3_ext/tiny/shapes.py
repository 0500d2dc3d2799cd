"""Model shapes for `sgl-eagle3 tiny --shape NAME`: the dimensions, overrides and their checks.

A shape is pure data (no torch): the target architecture and sizes, the draft's sizes, and the
aux layers a real draft of that model reads. The constructions (docs/reference/tiny.md) are written against
these fields only, so the same code builds a shape at its real size on a GPU and scaled down on a
CPU for the tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError

TOKENIZER_VOCAB = 2048  # the in-process BPE tokenizer: ids a prompt or the models can produce
HOT_CYCLE = 1024  # the partial construction's target walks a cycle over ids [0, HOT_CYCLE)


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str  # "llama" (LlamaForCausalLM) or "deepseek" (DeepseekV3ForCausalLM)
    vocab: int  # rows of embed_tokens / lm_head (>= TOKENIZER_VOCAB)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # Llama MLP; DeepSeek dense layers (first_k_dense_replace)
    rope_theta: float
    rms_eps: float
    std: float  # random-init standard deviation (0.01 keeps 32+ random layers finite in bf16)
    draft_vocab: int
    aux_layers: tuple[int, ...]  # our convention: output of decoder layer k
    # DeepSeek-V3 (MLA + MoE); ignored for llama
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    experts: int = 0
    active_experts: int = 0
    shared_experts: int = 0
    moe_intermediate: int = 0
    dense_layers: int = 0  # first_k_dense_replace
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    # the one-layer LlamaForCausalLMEagle3 draft (0 = follow the target / derived)
    draft_heads: int = 0
    draft_kv_heads: int = 0
    draft_head_dim: int = 0
    draft_intermediate: int = 0
    overrides: tuple[str, ...] = field(default=())

    # ---- derived
    @property
    def d_heads(self) -> int:
        return self.draft_heads or (self.heads if self.arch == "llama" else self.hidden // self.d_head_dim)

    @property
    def d_kv_heads(self) -> int:
        if self.draft_kv_heads:
            return self.draft_kv_heads
        return self.kv_heads if self.arch == "llama" else min(8, self.d_heads)

    @property
    def d_head_dim(self) -> int:
        return self.draft_head_dim or (self.head_dim if self.arch == "llama" else 128)

    @property
    def d_intermediate(self) -> int:
        return self.draft_intermediate or self.intermediate

    def target_params(self) -> int:
        """Parameter count of the target (embeddings and lm_head included)."""
        h, n = self.hidden, self.layers
        emb = 2 * self.vocab * h + h
        if self.arch == "llama":
            attn = h * self.heads * self.head_dim * 2 + h * self.kv_heads * self.head_dim * 2
            return emb + n * (attn + 3 * h * self.intermediate + 2 * h)
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        attn = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk
                + h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
                + self.heads * self.v_head_dim * h + 2 * h)
        dense = 3 * h * self.intermediate
        moe = (self.experts + self.shared_experts) * 3 * h * self.moe_intermediate + self.experts * (h + 1)
        nd = min(self.dense_layers, n)
        return emb + n * attn + nd * dense + (n - nd) * moe

    def draft_params(self) -> int:
        h = self.hidden
        qo = self.d_heads * self.d_head_dim
        kv = self.d_kv_heads * self.d_head_dim
        return (self.vocab * h + 3 * h * h + 2 * h * (qo + 2 * kv) + qo * h
                + 3 * h * self.d_intermediate + self.draft_vocab * h + 4 * h)

    def active_params_per_token(self) -> int:
        """Weights read per decode token at batch 1 (routed experts: only the active ones)."""
        if self.arch == "llama":
            return self.target_params() - self.vocab * self.hidden  # embedding: one row
        h, n = self.hidden, self.layers
        nd = min(self.dense_layers, n)
        idle = (self.experts - self.active_experts) * 3 * h * self.moe_intermediate
        return self.target_params() - self.vocab * h - (n - nd) * idle

    def describe(self) -> str:
        if self.arch == "llama":
            return (f"LlamaForCausalLM, {self.layers} layers, hidden {self.hidden}, {self.heads}/"
                    f"{self.kv_heads} heads x {self.head_dim}, MLP {self.intermediate}, vocab {self.vocab}")
        return (f"DeepseekV3ForCausalLM, {self.layers} layers ({self.dense_layers} dense), hidden "
                f"{self.hidden}, {self.heads} MLA heads, {self.experts} experts x "
                f"{self.moe_intermediate} ({self.active_experts} active + {self.shared_experts} shared), "
                f"vocab {self.vocab}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["aux_layers"] = list(self.aux_layers)
        d["overrides"] = list(self.overrides)
        d.update(draft_heads=self.d_heads, draft_kv_heads=self.d_kv_heads,
                 draft_head_dim=self.d_head_dim, draft_intermediate=self.d_intermediate)
        return d


TINY = Shape(name="tiny", arch="llama", vocab=2048, hidden=256, layers=4, heads=4, kv_heads=4,
             head_dim=64, intermediate=512, rope_theta=10000.0, rms_eps=1e-6, std=0.02,
             draft_vocab=1024, aux_layers=(0, 1, 2))

# Llama-3.1-8B (config.json of meta-llama/Llama-3.1-8B-Instruct), rope scaling left out. The aux
# layers are what SGLang captures for it by default and what EAGLE-3 drafts for it were trained on:
# loop indices [2, 16, 29] = outputs of layers 1, 15, 28 (config ids [1, 15, 28] under llama's +1).
LLAMA3_8B = Shape(name="llama3-8b", arch="llama", vocab=128256, hidden=4096, layers=32, heads=32,
                  kv_heads=8, head_dim=128, intermediate=14336, rope_theta=500000.0, rms_eps=1e-5,
                  std=0.01, draft_vocab=32000, aux_layers=(1, 15, 28))

# DeepSeek-V3 / Kimi-K2.5 architecture at Kimi's width (hidden 7168, 64 MLA heads, MLA ranks, expert
# MLP 2048, 8 active + 1 shared, one leading dense layer, n_group 1) with 16 layers and 32 routed
# experts: 52 GB of bf16 weights (docs/reference/tiny.md, "why these MoE dims"). Aux layers as Kimi-K2.5's
# draft reads them on 61 layers (outputs of 2, 30, 58), scaled: outputs of 2, N/2, N-3.
MOE = Shape(name="moe", arch="deepseek", vocab=163840, hidden=7168, layers=16, heads=64, kv_heads=64,
            head_dim=192, intermediate=18432, rope_theta=50000.0, rms_eps=1e-6, std=0.01,
            draft_vocab=32000, aux_layers=(2, 8, 13), q_lora_rank=1536, kv_lora_rank=512,
            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, experts=32, active_experts=8,
            shared_experts=1, moe_intermediate=2048, dense_layers=1, n_group=1, topk_group=1,
            routed_scaling_factor=2.827, draft_intermediate=18432)

SHAPES: dict[str, Shape] = {s.name: s for s in (TINY, LLAMA3_8B, MOE)}

# CLI flag -> field (the common ones; `--set FIELD=VALUE` reaches every integer field)
FLAG_FIELDS = {"layers": "layers", "hidden": "hidden", "intermediate": "intermediate",
               "heads": "heads", "kv_heads": "kv_heads", "head_dim": "head_dim", "vocab": "vocab",
               "draft_vocab": "draft_vocab", "experts": "experts",
               "active_experts": "active_experts", "moe_intermediate": "moe_intermediate"}
_INT_FIELDS = {f.name for f in dataclasses.fields(Shape) if f.type in ("int", int)}


def default_aux(arch: str, layers: int) -> tuple[int, ...]:
    """Aux layers (ours) a real draft of this family reads, for a given depth."""
    if arch == "llama":  # SGLang's defaults (loop [2, N//2, N-3]) = outputs of 1, N//2-1, N-4
        want = [1, layers // 2 - 1, layers - 4]
    else:  # Kimi-K2.5's draft: outputs of 2, N//2, N-3 (61 layers: 2, 30, 58)
        want = [2, layers // 2, layers - 3]
    ok = sorted({k for k in want if 0 <= k <= layers - 2})
    if len(ok) == 3:
        return tuple(ok)
    step = max(1, (layers - 2) // 3)
    return tuple(sorted({min(layers - 2, i * step) for i in range(3)}))


def get_shape(name: str = "tiny", **overrides: Any) -> Shape:
    """A named shape with field overrides applied and checked (UserError exit 2 on bad values)."""
    base = SHAPES.get(name)
    if base is None:
        raise UserError(f"--shape must be one of {', '.join(SHAPES)}, got {name!r}", exit_code=2)
    clean: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in _INT_FIELDS:
            raise UserError(f"unknown shape field {key!r}; known: {', '.join(sorted(_INT_FIELDS))}",
                            exit_code=2)
        try:
            iv = int(value)
        except (TypeError, ValueError):
            raise UserError(f"shape field {key} must be an integer, got {value!r}", exit_code=2) from None
        if iv < 0 or (iv == 0 and key not in ("dense_layers",)):
            raise UserError(f"shape field {key} must be positive, got {value!r}", exit_code=2)
        clean[key] = iv
    if not clean:
        return base
    shape = dataclasses.replace(base, **clean, overrides=tuple(f"{k}={v}" for k, v in clean.items()))
    if "layers" in clean:
        shape = dataclasses.replace(shape, aux_layers=default_aux(shape.arch, shape.layers))
    validate(shape)
    return shape


def parse_set(items: list[str] | None) -> dict[str, str]:
    """`--set FIELD=VALUE` items -> dict (UserError exit 2 on a malformed item)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set takes FIELD=VALUE, got {item!r}", exit_code=2)
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def validate(s: Shape) -> None:
    """Everything the constructions rely on; one line per problem (exit 2)."""
    def bad(msg: str) -> None:
        raise UserError(f"shape {s.name}: {msg}", exit_code=2)

    if s.vocab < TOKENIZER_VOCAB:
        bad(f"vocab {s.vocab} is smaller than the tokenizer ({TOKENIZER_VOCAB} tokens)")
    if not 64 <= s.draft_vocab <= s.vocab:
        bad(f"draft vocab {s.draft_vocab} must be in [64, vocab {s.vocab}]")
    if s.layers < 4:
        bad(f"layers {s.layers}: need at least 4 (three distinct captured layers below the last)")
    if s.hidden % 64:
        bad(f"hidden {s.hidden} must be a multiple of 64")
    if s.arch == "llama":
        if s.heads % s.kv_heads:
            bad(f"heads {s.heads} must be a multiple of kv heads {s.kv_heads}")
    else:
        if s.active_experts > s.experts:
            bad(f"active experts {s.active_experts} > experts {s.experts}")
        if s.experts % s.n_group or s.topk_group > s.n_group:
            bad(f"experts {s.experts} / n_group {s.n_group} / topk_group {s.topk_group} do not fit")
        if s.dense_layers > s.layers:
            bad(f"dense layers {s.dense_layers} > layers {s.layers}")
        if s.qk_rope_head_dim % 2:
            bad("qk_rope_head_dim must be even")
    dh, dkv, dhd = s.d_heads, s.d_kv_heads, s.d_head_dim
    if dh < 1 or dh % dkv:
        bad(f"draft heads {dh} must be a positive multiple of draft kv heads {dkv}")
    if dhd % 4:
        bad(f"draft head dim {dhd} must be a multiple of 4")
    if dkv * dhd > s.hidden:
        bad(f"draft kv width {dkv} x {dhd} exceeds hidden {s.hidden} (values carry a code of the "
            "embedding)")
