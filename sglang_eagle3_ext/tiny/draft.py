"""The one-layer EAGLE-3 draft (``LlamaForCausalLMEagle3``): config, random weights, constructions.

Format: what every SGLang release's ``models/llama_eagle3.py`` ``load_weights`` accepts (0.4.x
through 0.5.23): one decoder layer stored as ``midlayer.*`` (qkv reads ``[embeds, hidden]`` = 2H
inputs), ``fc.weight [H, n_aux*H]``, ``norm``, ``lm_head [draft_vocab, H]``, ``d2t`` (draft id ->
target id offsets) and ``t2d`` (bool mask), plus ``embed_tokens`` (SGLang replaces it with the
target's, which is what we store anyway).
"""

from __future__ import annotations

import math
from typing import Any

from .construct import readout, rms_normed
from .gen import Gen
from .shapes import TOKENIZER_VOCAB, Shape
from .targets import rope_fields, target_config

# Partial mode: draft rope base so large that rotations in the dims used for matching are ~0 for
# every position < 4096, the same-token attention score, and the carried-hidden scale.
DRAFT_ROPE_THETA = 1.0e9
SAME_TOKEN_SCORE = 64.0
NORM_SCALE = 1.0 / 32


def match_dims(head_dim: int) -> list[int]:
    """Head dims of the slow RoPE pairs (second half of the frequencies, neox layout)."""
    return list(range(head_dim // 4, head_dim // 2)) + list(range(3 * head_dim // 4, head_dim))


def draft_config(s: Shape, special: dict[str, int], partial: bool, aux_config_ids: list[int]) -> dict[str, Any]:
    if s.arch == "llama" and not s.draft_heads and not s.draft_intermediate:
        cfg = target_config(s, special)
    else:  # a Llama-style draft at the target's hidden size (DeepSeek / Kimi targets)
        from dataclasses import replace

        cfg = target_config(replace(s, arch="llama", heads=s.d_heads, kv_heads=s.d_kv_heads,
                                    head_dim=s.d_head_dim, intermediate=s.d_intermediate), special)
    cfg.update({
        "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
        "draft_vocab_size": s.draft_vocab, "target_hidden_size": s.hidden,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_config_ids),
                         "use_aux_hidden_state": True},
    })
    if partial:
        # SGLang >= 0.5.12: the hidden carried to the next draft step is the *normed* output, whose
        # scale we set with norm.weight (see docs/reference/tiny.md, "partial acceptance").
        cfg["norm_output"] = True
        cfg.update(rope_fields(DRAFT_ROPE_THETA))
    return cfg


def draft_weights(gen: Gen, s: Shape, embed: Any, n_aux: int) -> dict[str, Any]:
    """Random draft weights, drawn in a fixed order after the target's."""
    import torch

    h, std = s.hidden, s.std
    q_out, kv_out = s.d_heads * s.d_head_dim, s.d_kv_heads * s.d_head_dim
    inter = s.d_intermediate
    p = "midlayer."
    w = {
        "embed_tokens.weight": embed,
        "fc.weight": gen.rand(h, n_aux * h, std=std),
        p + "self_attn.q_proj.weight": gen.rand(q_out, 2 * h, std=std),
        p + "self_attn.k_proj.weight": gen.rand(kv_out, 2 * h, std=std),
        p + "self_attn.v_proj.weight": gen.rand(kv_out, 2 * h, std=std),
        p + "self_attn.o_proj.weight": gen.rand(h, q_out, std=std),
        p + "mlp.gate_proj.weight": gen.rand(inter, h, std=std),
        p + "mlp.up_proj.weight": gen.rand(inter, h, std=std),
        p + "mlp.down_proj.weight": gen.rand(h, inter, std=std),
        p + "input_layernorm.weight": gen.ones(h),
        p + "hidden_norm.weight": gen.ones(h),
        p + "post_attention_layernorm.weight": gen.ones(h),
        "norm.weight": gen.ones(h),
        "lm_head.weight": gen.rand(s.draft_vocab, h, std=std),
        # hot set = the first draft_vocab target ids: offsets all 0, mask true on that prefix.
        "d2t": torch.zeros(s.draft_vocab, dtype=torch.int64),
        "t2d": torch.arange(s.vocab) < s.draft_vocab,
    }
    return w


def norm_scale(s: Shape) -> float:
    """Final-norm weight of a partial draft: a power of two near 1/32 x RMS of the values' code,
    so the hidden carried to the next draft step stays ~1/32 of the current token's code."""
    kv = s.d_kv_heads * s.d_head_dim
    return 2.0 ** round(math.log2(NORM_SCALE * math.sqrt(kv / s.hidden)))


def make_partial(s: Shape, dw: dict[str, Any], embed_tok: Any, code_dims: list[int],
                 gmap: list[int]) -> None:
    """Turn random draft weights into "next token = g(input token)" (docs/reference/tiny.md, step 2).

    ``embed_tok``: the embedding rows of the tokenizer's ids (float); ``code_dims``: embedding dims
    that differ between tokens (+-1), which q and k match on.
    """
    import torch

    dev = embed_tok.device
    h, nh, nkv, hd = s.hidden, s.d_heads, s.d_kv_heads, s.d_head_dim
    group = nh // nkv
    dims = match_dims(hd)
    # RMS of an embedding row (the same for every token): input_layernorm divides by it.
    r_e = float(embed_tok[0].float().pow(2).mean().sqrt())
    scale = r_e * math.sqrt(SAME_TOKEN_SCORE * math.sqrt(hd) / len(dims))
    dw["fc.weight"].zero_()
    k = torch.zeros(nkv * hd, 2 * h, device=dev)
    for j in range(nkv):
        for idx, d in enumerate(dims):
            k[j * hd + d, code_dims[(j * len(dims) + idx) % len(code_dims)]] = scale
    q = torch.zeros(nh * hd, 2 * h, device=dev)
    for hq in range(nh):
        q[hq * hd:(hq + 1) * hd] = k[(hq // group) * hd:(hq // group + 1) * hd]
    dw["midlayer.self_attn.q_proj.weight"] = q
    dw["midlayer.self_attn.k_proj.weight"] = k
    # Values: the first nkv*hd embedding dims (the whole embedding when that is the hidden size);
    # o_proj copies the first query head of each KV group back to the same dims.
    kv = nkv * hd
    v = torch.zeros(kv, 2 * h, device=dev)
    v[:, :kv] = torch.eye(kv, device=dev)
    o = torch.zeros(h, nh * hd, device=dev)
    for j in range(nkv):
        o[j * hd:(j + 1) * hd, (j * group) * hd:(j * group + 1) * hd] = torch.eye(hd, device=dev)
    dw["midlayer.self_attn.v_proj.weight"] = v
    dw["midlayer.self_attn.o_proj.weight"] = o
    dw["midlayer.mlp.down_proj.weight"].zero_()
    ns = norm_scale(s)
    dw["norm.weight"] = torch.full((h,), ns, device=dev)
    # What reaches the final norm for input token x: o_proj(v(x)) (+ the small carried hidden).
    reach = torch.zeros(embed_tok.shape[0], h, device=dev)
    reach[:, :kv] = embed_tok[:, :kv].float()
    n = min(s.draft_vocab, TOKENIZER_VOCAB)
    w = readout(rms_normed(reach, s.rms_eps), torch.tensor(gmap, device=dev), n) / ns
    head = torch.zeros(s.draft_vocab, h, device=dev)
    head[:n] = w
    dw["lm_head.weight"] = head
