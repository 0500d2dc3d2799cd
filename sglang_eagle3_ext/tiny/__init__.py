"""Built-in tiny (and real-shape) models: a target and EAGLE-3 draft(s) that SGLang loads, made offline.

`build(out_dir, acceptance, shape=...)` writes Hugging Face folders (``target/`` and ``draft/``, or
``draft-P/`` per value of a list) plus ``tiny.json`` (what was built, and the acceptance the
construction predicts). Nothing is downloaded: weights come from a seeded torch generator (on the
GPU when there is one), the tokenizer is a byte-level BPE trained in-process on synthetic text.
docs/reference/tiny.md explains the shapes and constructions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..runtime.errors import UserError
from . import construct, draft, shapes, targets, trees, wiring
from . import paths as tpaths
from .construct import READOUT_MARGIN, simulate_accept  # noqa: F401 - public
from .gen import Gen, pick_device
from .shapes import SHAPES, TINY, Shape, get_shape  # noqa: F401 - public
from .store import ShardWriter
from .tokenizer import (  # noqa: F401
    CHAT_TEMPLATE,
    EOS,
    MAX_POS,
    PAD,
    SPECIALS,
    TAIL_TEMPLATE,
    VOCAB,
    build_tokenizer,
    chat_last_token,
    marker_words,
)

Acceptance = Literal["oracle", "random"] | float

# The built-in tiny shape, as module constants (tests and older callers use them).
HIDDEN = TINY.hidden
LAYERS = TINY.layers
HEADS = TINY.heads
KV_HEADS = TINY.kv_heads
HEAD_DIM = TINY.head_dim
INTERMEDIATE = TINY.intermediate
DRAFT_VOCAB = TINY.draft_vocab
AUX_LAYERS = list(TINY.aux_layers)
RMS_EPS = TINY.rms_eps
DRAFT_ROPE_THETA = draft.DRAFT_ROPE_THETA
NORM_SCALE = draft.NORM_SCALE
CPU_LIMIT_BYTES = 2 * 10**9  # bigger builds need a GPU (or --force)
REFERENCE_SGLANG = "0.5.23"  # whose aux-layer rules judge a wiring pair when none is installed


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path  # the first (or only) draft
    info: dict[str, Any]
    drafts: dict[str, Path] = field(default_factory=dict)  # acceptance label -> folder

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


def parse_acceptances(value: str | float | list | tuple) -> list[Acceptance]:
    """One value or a comma list (`0.6,0.8,1.0`: probabilities only, one target for all)."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str) and "," in value:
        items = [v for v in value.split(",")]
    else:
        return [parse_acceptance(value)]
    vals = [parse_acceptance(v) for v in items]
    if any(isinstance(v, str) for v in vals):
        raise UserError("a list of --acceptance values takes probabilities only (oracle and random "
                        f"each need their own target), got {value!r}", exit_code=2)
    if len(set(vals)) != len(vals):
        raise UserError(f"--acceptance list has a value twice: {value!r}", exit_code=2)
    return vals


def acceptance_label(acc: Acceptance) -> str:
    return acc if isinstance(acc, str) else f"{acc:g}"


def expected_accept_len(p: float, steps: int) -> float:
    """Accept length (incl. bonus) when each draft position agrees independently with prob p."""
    return sum(p**k for k in range(steps + 1))


def needed_bytes(shape: Shape, n_drafts: int = 1) -> tuple[int, int]:
    """bf16 bytes of (target, all drafts)."""
    return 2 * shape.target_params(), 2 * shape.draft_params() * n_drafts


def check_device(s: Shape, n_drafts: int, device: str | None = None, force: bool = False) -> str:
    """The build device; a real-size shape without a GPU is refused (one line, exit 2).

    The built-in tiny shape builds on the CPU unless asked (same bytes on every machine)."""
    dev = pick_device(device or ("cpu" if s.name == "tiny" else None))
    tb, db = needed_bytes(s, n_drafts)
    if dev.startswith("cpu") and tb + db > CPU_LIMIT_BYTES and not force:
        raise UserError(f"shape {s.name} needs {(tb + db) / 1e9:.1f} GB of bf16 weights (target "
                        f"{tb / 1e9:.1f} GB + draft{'s' if n_drafts > 1 else ''} {db / 1e9:.1f} GB) "
                        "and there is no CUDA GPU here: build it on a GPU, or pass --force",
                        exit_code=2)
    return dev


def _sglang_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return REFERENCE_SGLANG


def _prepare_out(out: Path) -> None:
    for parent in (out, *out.parents):
        if parent.exists():
            if not parent.is_dir():
                what = "exists and is not a folder" if parent == out else f"is under {parent}, a file"
                raise UserError(f"--out {out} {what}", exit_code=2)
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create it ({exc.strerror or exc})", exit_code=2) from None


def build(out_dir: str | Path, acceptance: Acceptance | str | list = "oracle", seed: int = 0,
          shape: Shape | str | None = None, trained_on: list[Any] | None = None,
          force: bool = False, device: str | None = None, alternatives: Any = None,
          regions: Any = None, paths: Any = None) -> TinyModels:
    """Write ``out_dir/target``, the draft folder(s) and ``out_dir/tiny.json``; return their paths.

    ``acceptance``: oracle | random | P, or a list of P (one target, ``draft-P/`` per value).
    ``shape``: a Shape or a name from SHAPES (default the built-in tiny one). ``trained_on``: our
    layers for the wiring construction (partial acceptance only). ``device``: default cuda if any.
    ``alternatives`` (conditional probabilities of ranks 1, 2, ...) / ``regions`` (rank-0
    probability per prompt region): the tree construction (trees.py; one P, no wiring).
    ``paths``: N prompts that walk N different stretches of the cycle (paths.py; chain, P).
    """
    t0 = time.perf_counter()
    accs = parse_acceptances(acceptance)
    s = shape if isinstance(shape, Shape) else get_shape(shape or "tiny")
    shapes.validate(s)
    multi = isinstance(acceptance, (list, tuple)) or (isinstance(acceptance, str) and "," in acceptance)
    partial = not isinstance(accs[0], str)
    if trained_on is not None and not partial:
        raise UserError("--trained-on needs --acceptance P (the wiring draft is right with "
                        "probability P when the right layers are captured)", exit_code=2)
    alts = trees.parse_alternatives(alternatives)
    regs = trees.parse_regions(regions)
    tree = bool(alts or regs)
    if tree and (multi or not partial or trained_on is not None):
        raise UserError("--alternatives / --regions need one --acceptance P (no list, no "
                        "--trained-on)", exit_code=2)
    n_paths = tpaths.parse_paths(paths)
    if n_paths and (tree or not partial):
        raise UserError("--paths needs --acceptance P and a chain build (a tree build's prompts walk "
                        "their regions: --regions)", exit_code=2)
    plan = wiring.plan(s, list(trained_on), seed) if trained_on is not None else None
    try:
        import torch
    except ImportError as exc:
        raise UserError(f"tiny models need torch, transformers, tokenizers, safetensors "
                        f"(pip install 'sglang-eagle3-ext[tiny]'): {exc}") from None
    dev = check_device(s, len(accs), device, force)
    out = Path(out_dir)
    _prepare_out(out)
    target = out / "target"
    labels = ([x.strip().lower() for x in acceptance.split(",")] if multi and isinstance(acceptance, str)
              else [acceptance_label(a) for a in accs])  # the user's spelling: draft-1.0/
    draft_dirs = {lab: out / (f"draft-{lab}" if multi else "draft") for lab in labels}
    # SGLang reads the target's tokenizer; the copies keep each draft folder self-contained.
    special = build_tokenizer(target, *draft_dirs.values(),
                              template=TAIL_TEMPLATE if regs or n_paths else CHAT_TEMPLATE)
    # every chat request's walk starts at f(chat_last); with regions or paths it is the prompt's own
    chat_last: int | None = None if regs or n_paths else chat_last_token(target)
    markers = marker_words(target, len(regs)) if regs else []
    tmaps = (trees.tree_maps(float(accs[0]), alts, seed, s.draft_vocab, regs, [i for _, i in markers])
             if tree else None)

    gen = Gen.create(seed, dev)
    # +-1 embeddings: every token has the same RMS, which the partial construction relies on.
    embed = gen.signs(s.vocab, s.hidden)
    code_dims = list(range(s.hidden))
    if plan is not None:
        wiring.embedding_layout(plan, embed)
        code_dims = list(range(plan.token_dims))
    embed_tok = embed[: VOCAB].float()
    lm_head = gen.rand(s.vocab, s.hidden, std=s.std)
    info: dict[str, Any] = {"schema": "sgl_eagle3_tiny/1", "shape": s.name,
                            "acceptance": accs[0] if not multi else accs, "seed": seed,
                            "vocab": s.vocab, "tokenizer_vocab": VOCAB, "draft_vocab": s.draft_vocab,
                            "hidden": s.hidden, "layers": s.layers, "aux_layers": list(s.aux_layers),
                            "special_ids": special, "eos_id": special[EOS]}
    if s.name != "tiny" or s.overrides:
        info["dims"] = s.to_dict()
        info["device"] = dev
    f_map: list[int] | None = None
    if accs[0] == "oracle":
        lm_head.zero_()  # all logits 0: greedy id 0 for target and draft (hot id 0 -> 0)
    elif accs[0] == "random":
        lm_head[VOCAB - len(SPECIALS):] = 0  # specials and ids the tokenizer never makes: no EOS
    else:
        f_map, _, _ = construct.partial_maps(float(accs[0]), seed, s.draft_vocab)
        if tmaps is not None:
            f_map = tmaps.f  # the same cycle; marker words sent to their region's start
        normed = construct.rms_normed(embed_tok, s.rms_eps)
        if plan is not None:  # the lm_head reads the token dims only
            normed[:, plan.token_dims:] = 0
        w = construct.readout(normed, torch.tensor(f_map), VOCAB)
        lm_head.zero_()
        lm_head[:VOCAB] = w.to(lm_head.dtype)

    words = tpaths.path_words(target, f_map, n_paths) if n_paths and f_map is not None else []

    # ---- target, streamed layer by layer into shards
    tw = ShardWriter(target, keep_fp32=targets.KEEP_FP32)
    tw.add("model.embed_tokens.weight", embed)
    tw.add("model.norm.weight", gen.ones(s.hidden))
    tw.add("lm_head.weight", lm_head)
    del lm_head
    for i in range(s.layers):
        lw = targets.layer_weights(gen, s, i)
        if partial:  # layers add nothing: the last hidden is the last token's embedding
            lw[targets.o_proj_name(i)].zero_()
            for name in targets.down_proj_names(s, i):
                lw[name].zero_()
        if plan is not None:
            wiring.modify_layer(s, plan, i, lw)
        for k, v in lw.items():
            tw.add(k, v)
        del lw
    target_bytes = tw.close()
    (target / "config.json").write_text(json.dumps(targets.target_config(s, special), indent=2) + "\n")

    # ---- draft(s): the same random draws for each, then each value's construction
    aux_ours = list(plan.trained) if plan is not None else list(s.aux_layers)
    version = _sglang_version()
    if plan is not None:
        aux_ids, default_capture = wiring.config_ids(s, aux_ours, version)
    elif s.name == "tiny" and not s.overrides:
        aux_ids, default_capture = list(s.aux_layers), list(s.aux_layers)
    else:
        from ..runtime import layers as lay

        fam = lay.FAMILIES["llama" if s.arch == "llama" else "deepseek_v2"]
        aux_ids = lay.ours_to_config(fam, version, aux_ours, s.layers)
        default_capture = aux_ours
    state = gen.state()
    drafts_info: dict[str, Any] = {}
    maps_g: dict[str, list[int]] = {}
    draft_bytes = 0
    for acc, lab in zip(accs, labels, strict=True):
        gen.restore(state)
        dw = draft.draft_weights(gen, s, embed.clone(), len(aux_ours))
        d_info: dict[str, Any] = {"path": str(draft_dirs[lab])}
        if acc == "oracle":
            dw["lm_head.weight"].zero_()
            d_info["expected_accept_len"] = {str(k): float(k + 1) for k in range(1, 9)}
        elif acc == "random":
            dw["lm_head.weight"][VOCAB - len(SPECIALS):] = 0
            d_info["expected_accept_len"] = {str(k): 1.0 for k in range(1, 9)}
        else:
            assert f_map is not None
            _, g_map, _ = construct.partial_maps(float(acc), seed, s.draft_vocab)
            if tmaps is not None:  # rank 0 is the chain's draft
                g_map = [c[0] for c in tmaps.cands] + g_map[len(tmaps.cands):]
                trees.make_tree_draft(s, dw, embed_tok, code_dims, tmaps, g_map)
            else:
                draft.make_partial(s, dw, embed_tok, code_dims, g_map)
            if plan is not None:
                wiring.draft_fc(plan, dw["fc.weight"], gen)
            d_info.update(construct.partial_info(f_map, g_map, s.draft_vocab, chat_last))
            if words:
                d_info["paths"] = tpaths.paths_info(f_map, g_map, [i for _, i in words])
            if tmaps is not None:
                prompts = {w: i for w, i in markers}
                d_info["tree"] = {"alternatives": alts, "regions": tmaps.regions,
                                  "markers": [w for w, _ in markers],
                                  **trees.tree_info(tmaps, chat_last, prompts=prompts)}
            maps_g[lab] = g_map
        dwr = ShardWriter(draft_dirs[lab])
        for k, v in dw.items():
            dwr.add(k, v)
        del dw
        draft_bytes += dwr.close()
        cfg = draft.draft_config(s, special, partial, aux_ids)
        (draft_dirs[lab] / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        drafts_info[lab] = d_info

    gen_cfg = {"eos_token_id": special[EOS], "pad_token_id": special[PAD], "do_sample": False}
    for folder in (target, *draft_dirs.values()):
        (folder / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    first = drafts_info[labels[0]]
    info["expected_accept_len"] = first["expected_accept_len"]
    if accs[0] == "oracle":
        info["greedy_token"] = 0
    if partial:
        for key in ("agree_fraction", "agree_fraction_hot", "per_position", "chat_last_token",
                    "expected_accept_len_chat", "per_position_chat", "request_range", "tree", "paths"):
            if key in first:
                info[key] = first[key]
        info["min_sglang"] = "0.5.12 (draft config norm_output)"
        if words:  # the prompts carry the first draft's per-prompt expectation
            tpaths.write_prompts(out / tpaths.PROMPTS_FILE, words, f_map, first["paths"])
            info["paths"] = {"prompts": str(out / tpaths.PROMPTS_FILE), "count": len(words),
                             **{k: v for k, v in first["paths"].items() if k != "per_prompt"}}
        maps: dict[str, Any] = {"f": f_map, "g": maps_g[labels[0]]}
        if multi:
            maps["g_by_acceptance"] = maps_g
        if tmaps is not None:
            maps["tree"] = tmaps.to_dict()
        (out / "maps.json").write_text(json.dumps(maps) + "\n")
    if multi:
        info["drafts"] = drafts_info
    if s.name != "tiny" or s.overrides or plan is not None:
        info["aux_config_ids"] = aux_ids
        info["target_bytes"] = target_bytes
        info["draft_bytes"] = draft_bytes
    if plan is not None:
        info["trained_on"] = list(plan.trained)
        info["wiring"] = {
            "trained_on": list(plan.trained), "aux_config_ids": aux_ids,
            "judged_for_sglang": version, "default_capture": default_capture,
            "default_capture_right": sorted(default_capture) == sorted(plan.trained),
            "fix": f"--aux-layers {','.join(map(str, plan.trained))}",
            "expected_accept_len_right": first["expected_accept_len"],
            "expected_accept_len_wrong": {str(k): 1.0 for k in range(1, 9)},
            "layout": plan.to_dict()}
    info["build_s"] = round(time.perf_counter() - t0, 2)
    (out / "tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    return TinyModels(target=target, draft=draft_dirs[labels[0]], info=info, drafts=draft_dirs)

