"""Built-in tiny models: a Llama target and an EAGLE-3 draft that SGLang loads, made offline.

`build(out_dir, acceptance)` writes two Hugging Face folders (``target/`` and ``draft/``) plus
``tiny.json`` (what was built, and the acceptance the construction predicts). Nothing is
downloaded: weights come from a seeded torch generator, the tokenizer is a byte-level BPE trained
in-process on synthetic text. docs/tiny.md explains the constructions.

Draft format (what every SGLang release's ``models/llama_eagle3.py`` ``load_weights`` accepts,
0.4.x through 0.5.23): ``architectures=["LlamaForCausalLMEagle3"]``, one decoder layer stored as
``midlayer.*`` (qkv reads ``[embeds, hidden]`` = 2H inputs), ``fc.weight [H, 3H]``, ``norm``,
``lm_head [draft_vocab, H]``, ``d2t`` (draft id -> target id offsets) and ``t2d`` (bool mask),
plus ``embed_tokens`` (SGLang overwrites it with the target's, which is what we store anyway).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import UserError

Acceptance = Literal["oracle", "random"] | float

VOCAB = 2048
HIDDEN = 256
LAYERS = 4
HEADS = 4
KV_HEADS = 4  # the partial draft's values carry the whole embedding: KV_HEADS * HEAD_DIM == HIDDEN
HEAD_DIM = 64
INTERMEDIATE = 512
DRAFT_VOCAB = 1024  # hot set = target ids [0, DRAFT_VOCAB): d2t is all zeros
AUX_LAYERS = [0, 1, 2]
MAX_POS = 4096
RMS_EPS = 1e-6
# Special tokens come last (ids 2043..2047) so that id 0 (the "oracle" token) and the whole hot set
# are ordinary text, and no construction below can ever pick EOS.
SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
EOS = "<|end|>"
PAD = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Partial mode: draft rope base so large that rotations in the dims used for matching are ~0 for
# every position < MAX_POS, and the final-norm scale that keeps the carried draft hidden small.
DRAFT_ROPE_THETA = 1.0e9
MATCH_DIMS = list(range(16, 32)) + list(range(48, 64))  # rope pairs 16..31 (neox layout)
QK_SCALE = 4.0
NORM_SCALE = 1.0 / 32
READOUT_MARGIN = 48.0


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path
    info: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.target.parent


def parse_acceptance(value: str | float) -> Acceptance:
    """`oracle`, `random` or a probability in [0, 1] -> canonical value (UserError otherwise)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("oracle", "random"):
            return v  # type: ignore[return-value]
        try:
            p = float(v)
        except ValueError:
            raise UserError(
                f"--acceptance must be oracle, random or a probability in [0, 1], got {value!r}",
                exit_code=2) from None
    else:
        p = float(value)
    if not 0.0 <= p <= 1.0 or p != p:
        raise UserError(f"--acceptance probability must be in [0, 1], got {value!r}", exit_code=2)
    return p


def expected_accept_len(p: float, steps: int) -> float:
    """Accept length (incl. bonus) when each draft position agrees independently with prob p."""
    return sum(p**k for k in range(steps + 1))


# ---------------------------------------------------------------------------------------------
# tokenizer


def _corpus() -> list[str]:
    """Deterministic syllable text: rich enough for the BPE trainer to fill the whole vocab."""
    rng = random.Random(20260101)
    cons = "b c d f g h j k l m n p r s t v w z ch sh th".split()
    vow = "a e i o u ai ou ea".split()
    syl = [c + v for c in cons for v in vow] + vow
    words = ["".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    lines = []
    for _ in range(4000):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        lines.append(f"{s.capitalize()}{rng.choice('.,!?;')} {rng.randint(0, 9999)}")
    return lines


def build_tokenizer(*outs: Path) -> dict[str, int]:
    """Train the byte-level BPE, save it (with chat template) into each folder; return special ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS), min_frequency=1, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(_corpus(), trainer)
    if tok.get_vocab_size() != VOCAB - len(SPECIALS):  # corpus too poor for this tokenizers version
        raise UserError(f"tokenizer training gave {tok.get_vocab_size()} tokens, "
                        f"expected {VOCAB - len(SPECIALS)}")
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   model_max_length=MAX_POS, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    for out in outs:
        fast.save_pretrained(str(out))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    if min(ids.values()) != VOCAB - len(SPECIALS):
        raise UserError(f"special token ids not at the end of the vocab: {ids}")
    return ids


# ---------------------------------------------------------------------------------------------
# configs


def _rope(theta: float) -> dict[str, Any]:
    # Both spellings: transformers 4.x reads rope_theta, 5.x rope_parameters (and converts the old).
    return {"rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
            "rope_scaling": None}


def target_config(special: dict[str, int]) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu",
        "max_position_embeddings": MAX_POS, "rms_norm_eps": RMS_EPS,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": None, "eos_token_id": special[EOS], "pad_token_id": special[PAD],
        "torch_dtype": "bfloat16", "dtype": "bfloat16", "initializer_range": 0.02,
        **_rope(10000.0),
    }


def draft_config(special: dict[str, int], partial: bool) -> dict[str, Any]:
    cfg = target_config(special)
    cfg.update({
        "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
        "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": HIDDEN,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS,
                         "use_aux_hidden_state": True},
    })
    if partial:
        # SGLang >= 0.5.12: the hidden carried to the next draft step is the *normed* output, whose
        # scale we set with norm.weight (see docs/tiny.md, "partial acceptance").
        cfg["norm_output"] = True
        cfg.update(_rope(DRAFT_ROPE_THETA))
    return cfg


# ---------------------------------------------------------------------------------------------
# weights


def _rand(g, *shape: int, std: float = 0.02):
    import torch

    return torch.randn(*shape, generator=g) * std


def _target_weights(g, embed) -> dict[str, Any]:
    import torch

    w: dict[str, Any] = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN),
                         "lm_head.weight": _rand(g, VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = _rand(g, HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = _rand(g, KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = _rand(g, KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = _rand(g, HIDDEN, HEADS * HEAD_DIM)
        w[p + "mlp.gate_proj.weight"] = _rand(g, INTERMEDIATE, HIDDEN)
        w[p + "mlp.up_proj.weight"] = _rand(g, INTERMEDIATE, HIDDEN)
        w[p + "mlp.down_proj.weight"] = _rand(g, HIDDEN, INTERMEDIATE)
        w[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        w[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    return w


def _draft_weights(g, embed) -> dict[str, Any]:
    import torch

    p = "midlayer."
    return {
        "embed_tokens.weight": embed,
        "fc.weight": _rand(g, HIDDEN, 3 * HIDDEN),
        p + "self_attn.q_proj.weight": _rand(g, HEADS * HEAD_DIM, 2 * HIDDEN),
        p + "self_attn.k_proj.weight": _rand(g, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        p + "self_attn.v_proj.weight": _rand(g, KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        p + "self_attn.o_proj.weight": _rand(g, HIDDEN, HEADS * HEAD_DIM),
        p + "mlp.gate_proj.weight": _rand(g, INTERMEDIATE, HIDDEN),
        p + "mlp.up_proj.weight": _rand(g, INTERMEDIATE, HIDDEN),
        p + "mlp.down_proj.weight": _rand(g, HIDDEN, INTERMEDIATE),
        p + "input_layernorm.weight": torch.ones(HIDDEN),
        p + "hidden_norm.weight": torch.ones(HIDDEN),
        p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": _rand(g, DRAFT_VOCAB, HIDDEN),
        # hot set = the first DRAFT_VOCAB target ids: offsets all 0, mask true on that prefix.
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.arange(VOCAB) < DRAFT_VOCAB,
    }


def _readout(inputs, labels, rows: int):
    """Linear readout W [rows, H] with argmax(inputs @ W.T) == labels for every input, by margin.

    Start from the class sums (each row = sum of its inputs), then perceptron corrections until
    every input wins by READOUT_MARGIN when evaluated in bfloat16 (what the GPU runs).
    """
    import torch

    w = torch.zeros(rows, inputs.shape[1])
    w.index_add_(0, labels, inputs)
    idx = torch.arange(len(labels))
    for _ in range(200):
        logits = (inputs.bfloat16() @ w.bfloat16().T).float()
        own = logits[idx, labels].clone()
        logits[idx, labels] = -float("inf")
        best_other, other = logits.max(dim=1)
        bad = (own - best_other) < READOUT_MARGIN
        if not bad.any():
            return w
        w.index_add_(0, labels[bad], inputs[bad] * 0.25)
        w.index_add_(0, other[bad], -inputs[bad] * 0.25)
    raise UserError("tiny: could not build a separable readout (try another --seed)")


def _partial_maps(p: float, seed: int) -> tuple[list[int], list[int], list[int]]:
    """f (target next token), g (draft next token) over all ids, and the agreement set.

    f on the hot set [0, DRAFT_VOCAB) is one random cycle, so generation visits every hot token;
    other ids map into the hot set. g equals f on a random p-fraction of ids, else a different
    hot token.
    """
    rng = random.Random(seed * 7919 + 17)
    hot = list(range(DRAFT_VOCAB))
    order = hot[:]
    rng.shuffle(order)
    f = [0] * VOCAB
    for a, b in zip(order, order[1:] + order[:1], strict=True):
        f[a] = b
    for x in range(DRAFT_VOCAB, VOCAB):
        f[x] = rng.randrange(DRAFT_VOCAB)
    n_agree = round(p * VOCAB)
    ids = list(range(VOCAB))
    rng.shuffle(ids)
    agree = sorted(ids[:n_agree])
    agree_set = set(agree)
    g = []
    for x in range(VOCAB):
        if x in agree_set:
            g.append(f[x])
        else:
            y = rng.randrange(DRAFT_VOCAB - 1)
            g.append(y if y < f[x] else y + 1)  # any hot token except f[x]
    return f, g, agree


def _normed_embeddings(embed):
    import torch

    x = embed.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)


def _make_partial(g, tw: dict, dw: dict, p: float, seed: int) -> dict[str, Any]:
    """Turn random weights into the partial-acceptance construction (docs/tiny.md)."""
    import torch

    f, gmap, agree = _partial_maps(p, seed)
    e = _normed_embeddings(tw["model.embed_tokens.weight"])
    # Target: layers add nothing to the residual stream, so the last hidden is the token's own
    # embedding and the greedy next token is f(last token), whatever the context.
    for i in range(LAYERS):
        tw[f"model.layers.{i}.self_attn.o_proj.weight"].zero_()
        tw[f"model.layers.{i}.mlp.down_proj.weight"].zero_()
    tw["lm_head.weight"] = _readout(e, torch.tensor(f), VOCAB)
    # Draft: fc = 0 (ignore target features); attention keys/queries are +-1 codes of the token
    # embedding in rope-invariant dims, so each query attends only to positions holding the same
    # token; values = the embedding, o_proj = identity, MLP adds 0. The stream is thus the current
    # token's embedding (+ the small normed hidden carried from the previous step).
    dw["fc.weight"].zero_()
    q = torch.zeros(HEADS * HEAD_DIM, 2 * HIDDEN)
    for h in range(HEADS):
        for j, d in enumerate(MATCH_DIMS):
            q[h * HEAD_DIM + d, (h * len(MATCH_DIMS) + j) % HIDDEN] = QK_SCALE
    dw["midlayer.self_attn.q_proj.weight"] = q
    dw["midlayer.self_attn.k_proj.weight"] = q.clone()
    v = torch.zeros(KV_HEADS * HEAD_DIM, 2 * HIDDEN)
    v[:, :HIDDEN] = torch.eye(HIDDEN)
    dw["midlayer.self_attn.v_proj.weight"] = v
    dw["midlayer.self_attn.o_proj.weight"] = torch.eye(HIDDEN)
    dw["midlayer.mlp.down_proj.weight"].zero_()
    dw["norm.weight"] = torch.full((HIDDEN,), NORM_SCALE)
    dw["lm_head.weight"] = _readout(e, torch.tensor(gmap), DRAFT_VOCAB) / NORM_SCALE
    return {"f": f, "g": gmap, "agree_ids": len(agree)}


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


# ---------------------------------------------------------------------------------------------


def _save(folder: Path, weights: dict, config: dict) -> None:
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    out = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
           for k, v in weights.items()}
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def build(out_dir: str | Path, acceptance: Acceptance | str = "oracle", seed: int = 0) -> TinyModels:
    """Write ``out_dir/target``, ``out_dir/draft`` and ``out_dir/tiny.json``; return their paths."""
    acc = parse_acceptance(acceptance)
    try:
        import torch
    except ImportError as exc:
        raise UserError(f"tiny models need torch, transformers, tokenizers, safetensors "
                        f"(pip install 'sglang-eagle3-ext[tiny]'): {exc}") from None
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder", exit_code=2)
    target, draft = out / "target", out / "draft"
    # SGLang reads the target's tokenizer; the copy keeps the draft folder self-contained.
    special = build_tokenizer(target, draft)

    g = torch.Generator().manual_seed(seed)
    # +-1 embeddings: every token has the same RMS, which the partial construction relies on.
    embed = torch.randint(0, 2, (VOCAB, HIDDEN), generator=g).float() * 2 - 1
    tw = _target_weights(g, embed)
    dw = _draft_weights(g, embed.clone())
    partial = not isinstance(acc, str)
    info: dict[str, Any] = {"schema": "sgl_eagle3_tiny/1", "acceptance": acc, "seed": seed,
                            "vocab": VOCAB, "draft_vocab": DRAFT_VOCAB, "hidden": HIDDEN,
                            "layers": LAYERS, "aux_layers": AUX_LAYERS,
                            "special_ids": special, "eos_id": special[EOS]}
    if acc == "oracle":
        # Both lm_heads zero: every greedy choice is id 0 for target and draft (hot id 0 -> 0).
        tw["lm_head.weight"].zero_()
        dw["lm_head.weight"].zero_()
        info["expected_accept_len"] = {str(s): float(s + 1) for s in range(1, 9)}
        info["greedy_token"] = 0
    elif acc == "random":
        # Special tokens' rows zero: random logits always have a positive max, so no EOS.
        tw["lm_head.weight"][VOCAB - len(SPECIALS):] = 0
        info["expected_accept_len"] = {str(s): 1.0 for s in range(1, 9)}
    else:
        maps = _make_partial(g, tw, dw, float(acc), seed)
        f, gm = maps["f"], maps["g"]
        info["agree_fraction"] = maps["agree_ids"] / VOCAB
        hot_agree = sum(f[x] == gm[x] for x in range(DRAFT_VOCAB)) / DRAFT_VOCAB
        info["agree_fraction_hot"] = hot_agree
        info["expected_accept_len"] = {}
        info["per_position"] = {}
        for s in range(1, 9):
            alen, rates = simulate_accept(f, gm, s)
            info["expected_accept_len"][str(s)] = round(alen, 4)
            info["per_position"][str(s)] = [round(r, 4) for r in rates]
        info["min_sglang"] = "0.5.12 (draft config norm_output)"
        (out / "maps.json").parent.mkdir(parents=True, exist_ok=True)
        (out / "maps.json").write_text(json.dumps({"f": f, "g": gm}) + "\n")
    _save(target, tw, target_config(special))
    _save(draft, dw, draft_config(special, partial))
    gen = {"eos_token_id": special[EOS], "pad_token_id": special[PAD], "do_sample": False}
    for folder in (target, draft):
        (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (out / "tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    return TinyModels(target=target, draft=draft, info=info)
