"""Target models: config.json and random decoder-layer weights, in Hugging Face checkpoint names.

Llama: ``model.layers.i.self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``, two norms.
DeepSeek-V3 (what SGLang's ``models/deepseek_v2.py`` ``load_weights`` and transformers'
``DeepseekV3ForCausalLM`` both read from a bf16 checkpoint, 0.5.16 / 0.5.23): MLA
``self_attn.q_a_proj``, ``q_a_layernorm``, ``q_b_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``,
``kv_b_proj``, ``o_proj``; dense layers ``mlp.{gate,up,down}_proj``; MoE layers ``mlp.gate.weight``,
``mlp.gate.e_score_correction_bias`` (float32), ``mlp.experts.{j}.{gate,up,down}_proj``,
``mlp.shared_experts.{gate,up,down}_proj``. No ``quantization_config``: bf16 weights only.
"""

from __future__ import annotations

from typing import Any

from .gen import Gen
from .shapes import Shape
from .tokenizer import EOS, MAX_POS, PAD


def rope_fields(theta: float) -> dict[str, Any]:
    # Both spellings: transformers 4.x reads rope_theta, 5.x rope_parameters (and converts the old).
    return {"rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
            "rope_scaling": None}


def _common(s: Shape, special: dict[str, int]) -> dict[str, Any]:
    return {"vocab_size": s.vocab, "hidden_size": s.hidden, "intermediate_size": s.intermediate,
            "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "num_key_value_heads": s.kv_heads, "hidden_act": "silu",
            "max_position_embeddings": MAX_POS, "rms_norm_eps": s.rms_eps,
            "tie_word_embeddings": False, "attention_bias": False,
            "bos_token_id": None, "eos_token_id": special[EOS], "pad_token_id": special[PAD],
            "torch_dtype": "bfloat16", "dtype": "bfloat16", "initializer_range": 0.02}


def target_config(s: Shape, special: dict[str, int]) -> dict[str, Any]:
    c = _common(s, special)
    if s.arch == "llama":
        c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **c,
             "head_dim": s.head_dim, "mlp_bias": False}
        c.update(rope_fields(s.rope_theta))
        # the historical key order of the tiny config (same bytes as before)
        order = ["architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "hidden_act", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                 "attention_bias", "mlp_bias", "bos_token_id", "eos_token_id", "pad_token_id",
                 "torch_dtype", "dtype", "initializer_range", "rope_theta", "rope_parameters",
                 "rope_scaling"]
        return {k: c[k] for k in order}
    c = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", **c,
         "moe_intermediate_size": s.moe_intermediate, "n_routed_experts": s.experts,
         "n_shared_experts": s.shared_experts, "num_experts_per_tok": s.active_experts,
         "routed_scaling_factor": s.routed_scaling_factor, "n_group": s.n_group,
         "topk_group": s.topk_group, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
         "norm_topk_prob": True, "first_k_dense_replace": s.dense_layers, "moe_layer_freq": 1,
         "q_lora_rank": s.q_lora_rank, "kv_lora_rank": s.kv_lora_rank,
         "qk_nope_head_dim": s.qk_nope_head_dim, "qk_rope_head_dim": s.qk_rope_head_dim,
         "v_head_dim": s.v_head_dim, "num_nextn_predict_layers": 0, "ep_size": 1,
         "rope_interleave": True}
    c.update(rope_fields(s.rope_theta))
    return c


def writer_mlp_prefix(s: Shape, i: int) -> str:
    """The MLP of layer i whose output is a plain linear map we control (docs/reference/tiny.md, wiring):
    the dense MLP, or the shared expert of a MoE layer."""
    if s.arch == "llama" or i < s.dense_layers:
        return f"model.layers.{i}.mlp."
    return f"model.layers.{i}.mlp.shared_experts."


def writer_mlp_width(s: Shape, i: int) -> int:
    if s.arch == "llama" or i < s.dense_layers:
        return s.intermediate
    return s.shared_experts * s.moe_intermediate


def down_proj_names(s: Shape, i: int) -> list[str]:
    """Every MLP output projection of layer i (zeroed by the partial construction)."""
    p = f"model.layers.{i}.mlp."
    if s.arch == "llama" or i < s.dense_layers:
        return [p + "down_proj.weight"]
    return ([p + f"experts.{j}.down_proj.weight" for j in range(s.experts)]
            + [p + "shared_experts.down_proj.weight"])


def layer_weights(gen: Gen, s: Shape, i: int) -> dict[str, Any]:
    """Random weights of decoder layer i, drawn in a fixed order (same seed -> same tensors)."""
    h, std = s.hidden, s.std
    p = f"model.layers.{i}."
    w: dict[str, Any] = {}
    if s.arch == "llama":
        w[p + "self_attn.q_proj.weight"] = gen.rand(s.heads * s.head_dim, h, std=std)
        w[p + "self_attn.k_proj.weight"] = gen.rand(s.kv_heads * s.head_dim, h, std=std)
        w[p + "self_attn.v_proj.weight"] = gen.rand(s.kv_heads * s.head_dim, h, std=std)
        w[p + "self_attn.o_proj.weight"] = gen.rand(h, s.heads * s.head_dim, std=std)
        w[p + "mlp.gate_proj.weight"] = gen.rand(s.intermediate, h, std=std)
        w[p + "mlp.up_proj.weight"] = gen.rand(s.intermediate, h, std=std)
        w[p + "mlp.down_proj.weight"] = gen.rand(h, s.intermediate, std=std)
        w[p + "input_layernorm.weight"] = gen.ones(h)
        w[p + "post_attention_layernorm.weight"] = gen.ones(h)
        return w
    a = p + "self_attn."
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    w[a + "q_a_proj.weight"] = gen.rand(s.q_lora_rank, h, std=std)
    w[a + "q_a_layernorm.weight"] = gen.ones(s.q_lora_rank)
    w[a + "q_b_proj.weight"] = gen.rand(s.heads * qk, s.q_lora_rank, std=std)
    w[a + "kv_a_proj_with_mqa.weight"] = gen.rand(s.kv_lora_rank + s.qk_rope_head_dim, h, std=std)
    w[a + "kv_a_layernorm.weight"] = gen.ones(s.kv_lora_rank)
    w[a + "kv_b_proj.weight"] = gen.rand(s.heads * (s.qk_nope_head_dim + s.v_head_dim),
                                         s.kv_lora_rank, std=std)
    w[a + "o_proj.weight"] = gen.rand(h, s.heads * s.v_head_dim, std=std)
    m = p + "mlp."
    if i < s.dense_layers:
        w[m + "gate_proj.weight"] = gen.rand(s.intermediate, h, std=std)
        w[m + "up_proj.weight"] = gen.rand(s.intermediate, h, std=std)
        w[m + "down_proj.weight"] = gen.rand(h, s.intermediate, std=std)
    else:
        import torch

        w[m + "gate.weight"] = gen.rand(s.experts, h, std=std)
        w[m + "gate.e_score_correction_bias"] = torch.zeros(s.experts, device=gen.device)
        for j in range(s.experts):
            e = m + f"experts.{j}."
            w[e + "gate_proj.weight"] = gen.rand(s.moe_intermediate, h, std=std)
            w[e + "up_proj.weight"] = gen.rand(s.moe_intermediate, h, std=std)
            w[e + "down_proj.weight"] = gen.rand(h, s.moe_intermediate, std=std)
        sh = s.shared_experts * s.moe_intermediate
        w[m + "shared_experts.gate_proj.weight"] = gen.rand(sh, h, std=std)
        w[m + "shared_experts.up_proj.weight"] = gen.rand(sh, h, std=std)
        w[m + "shared_experts.down_proj.weight"] = gen.rand(h, sh, std=std)
    w[p + "input_layernorm.weight"] = gen.ones(h)
    w[p + "post_attention_layernorm.weight"] = gen.ones(h)
    return w


def o_proj_name(i: int) -> str:
    return f"model.layers.{i}.self_attn.o_proj.weight"


KEEP_FP32 = ("e_score_correction_bias",)
