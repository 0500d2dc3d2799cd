"""Which target hidden states feed the EAGLE-3 draft: one convention, conversions, checks, override.

Our convention (the only one users type or read): **"output of decoder layer k"**, 0-based, and the
embedding output spelled ``emb``. SGLang has three other spellings, all converted here:

- **loop index** i: SGLang captures the residual stream at the top of decoder-loop iteration i,
  before layer i runs. Loop index i = input to layer i = output of layer i-1 = HF
  ``hidden_states[i]``; loop index 0 = embedding output (reference/sglang-version-map.md 3.3).
- **HF index**: ``output_hidden_states`` index, identical to the loop index (``--trained-on-hf``).
- **config id**: ``eagle_config.eagle_aux_hidden_state_layer_ids`` in the draft's config.json.
  Each model family turns config ids into loop indices with its own rule, and the rule changed
  across releases (``config_to_loop`` below mirrors every ``set_eagle3_layers_to_capture``).

This module is imported inside SGLang scheduler processes (``override_layer_ids``), so it must stay
cheap: stdlib only at import time, never torch or sglang.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

from .errors import UserError
from .safeparse import CONFIG_LIMIT, json_loads, read_text
from .settings import AUX_LAYERS
from .sglang_env import parse_version

ENV = AUX_LAYERS.name
EMB = "emb"
Layer = int | str  # decoder-layer index k >= 0, or EMB

logger = logging.getLogger("sglang_eagle3_ext.layers")


# --------------------------------------------------------------------------------------------
# Our convention <-> loop / HF indices


def to_loop(layer: Layer) -> int:
    """Our layer -> SGLang capture-loop index (= HF hidden_states index)."""
    return 0 if layer == EMB else int(layer) + 1


def from_loop(index: int) -> Layer:
    """Capture-loop index (= HF hidden_states index) -> our layer. Negative stays negative."""
    return EMB if index == 0 else index - 1


def format_layers(layers: list[Layer] | tuple[Layer, ...]) -> str:
    return ",".join(str(x) for x in layers)


def _split(text: str) -> list[str]:
    """Comma-separated (spaces around items allowed; ``[..]`` kept for pasted lists); an empty
    item (``1,,2``, a trailing comma) is an error, not skipped: it is usually a lost number."""
    body = str(text).strip().strip("[]()").strip()
    if not body:
        raise UserError(f"no layers in {text!r}; write e.g. 2,30,58", exit_code=2)
    parts = [p.strip() for p in body.split(",")] if "," in body else body.split()
    if any(not p for p in parts):
        raise UserError(f"empty item in {text!r} (two commas in a row or a trailing comma); "
                        "write e.g. 2,30,58", exit_code=2)
    return parts


def parse_layers(text: str) -> list[Layer]:
    """'emb,2,30' -> ['emb', 2, 30] in our convention (output of decoder layer k, 0-based).

    ``-1`` is refused on purpose: it is SGLang's *config* spelling of the embedding under the +1
    rule, and mixing spellings is how the embedding slipped into the seeds' capture.
    """
    out: list[Layer] = []
    for part in _split(text):
        if part.lower() in (EMB, "embed", "embedding", "embeddings"):
            item: Layer = EMB
        elif re.fullmatch(r"\d+", part):
            item = int(part)
        elif re.fullmatch(r"-\d+", part):
            raise UserError(
                f"layer {part!r} in {text!r}: layers are 'output of decoder layer k' (k >= 0); "
                "write 'emb' for the embedding output (SGLang's config id -1)", exit_code=2)
        else:
            raise UserError(f"layer {part!r} in {text!r} is not a layer number or 'emb'", exit_code=2)
        if item in out:
            raise UserError(f"layer {part} appears twice in {text!r}", exit_code=2)
        out.append(item)
    return out


def validate_layers(layers: list[Layer], *, num_layers: int | None = None, count: int | None = None,
                    what: str = "--aux-layers", count_from: str = "") -> None:
    """Count and range checks, where the target/draft configs are known (UserError, exit 2)."""
    text = format_layers(layers)
    if count is not None and len(layers) != count:
        why = f" ({count_from})" if count_from else ""
        raise UserError(f"{what} {text}: names {len(layers)} layer(s) but the draft expects {count} "
                        f"aux hidden states{why}; give exactly {count}", exit_code=2)
    if num_layers:
        over = [x for x in layers if x != EMB and int(x) > num_layers - 1]
        if over:
            raise UserError(f"{what} {text}: layer {over[0]} does not exist; the target has {num_layers} "
                            f"decoder layers (0..{num_layers - 1})", exit_code=2)


def _local_config(path: Any) -> dict | None:
    """config.json of a local model folder, or None (a hub id, unreadable: checked elsewhere)."""
    from pathlib import Path

    if not path:
        return None
    f = Path(str(path)).expanduser() / "config.json"
    try:
        data = json_loads(read_text(f, what="a model config", limit=CONFIG_LIMIT), strict=False)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_aux_for_launch(text: str | None, model: Any, draft: Any, version: str) -> list[Layer] | None:
    """`launch --aux-layers`: parse (the one parser) and check against the target's decoder layers
    and the draft's aux count when their config.json files are local. Exit 2 before any start."""
    if text is None:
        return None
    wanted = parse_layers(str(text))
    target_cfg, draft_cfg = _local_config(model), _local_config(draft)
    count, count_from = draft_count(draft_cfg, version) if draft_cfg is not None else (None, "")
    validate_layers(wanted, num_layers=num_hidden_layers(target_cfg) if target_cfg else None,
                    count=count, count_from=count_from)
    return wanted


def parse_hf_layers(text: str) -> list[Layer]:
    """HF ``hidden_states`` indices ('3,31,59') -> our layers ([2, 30, 58]); index 0 -> 'emb'."""
    out: list[Layer] = []
    for part in _split(text):
        if not re.fullmatch(r"\d+", part):
            raise UserError(f"HF hidden_states index {part!r} in {text!r} must be an integer >= 0",
                            exit_code=2)
        item = from_loop(int(part))
        if item in out:
            raise UserError(f"index {part} appears twice in {text!r}", exit_code=2)
        out.append(item)
    return out


def loop_label(index: int, num_layers: int, final_ok: bool = False) -> str:
    """One capture index in our words: 'emb', 'k', or 'never(loop i)' when the loop never gets there."""
    if index < 0 or index > num_layers or (index == num_layers and not final_ok):
        return f"never(loop {index})"
    return str(from_loop(index))


def describe(layers: list[Layer]) -> str:
    """Plain words: 'emb + outputs of layers 2, 30, 58'."""
    emb = [x for x in layers if x == EMB]
    ks = [str(x) for x in layers if x != EMB]
    parts = []
    if emb:
        parts.append("the embedding output (emb)")
    if ks:
        parts.append(("output of layer " if len(ks) == 1 else "outputs of layers ") + ", ".join(ks))
    return " + ".join(parts) or "nothing"


# --------------------------------------------------------------------------------------------
# Model families and their rules, per release (reference/sglang-version-map.md, section 3)


@dataclass(frozen=True)
class Family:
    name: str
    source: str  # sglang/srt/models/<source> holds its set_eagle3_layers_to_capture
    since: str  # first release whose model class has set_eagle3_layers_to_capture (3.2)
    classes: tuple[str, ...]
    rules_of: str = ""  # delegates to another family's rule (kimi_k25 -> deepseek_v2)
    # The id rule read from the release's own method (serve/capture_rules.py): plus1, first_id,
    # max_n. Empty: the hand rule of the family and release (rule_kind).
    kind: str = ""
    shift_defaults: bool = False  # the defaults go through +1 too (MiniMax-M3 VL)

    @property
    def rule_family(self) -> str:
        return self.rules_of or self.name


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", "llama.py", "0.4.6",
           ("LlamaForCausalLM", "Phi3ForCausalLM", "InternLM3ForCausalLM", "MistralForCausalLM")),
    Family("qwen2", "qwen2.py", "0.5.2", ("Qwen2ForCausalLM",)),
    Family("qwen3", "qwen3.py", "0.4.9", ("Qwen3ForCausalLM",)),
    Family("qwen2_moe", "qwen2_moe.py", "0.5.2", ("Qwen2MoeForCausalLM",)),
    Family("qwen3_moe", "qwen3_moe.py", "0.4.9", ("Qwen3MoeForCausalLM",)),
    Family("glm4_moe", "glm4_moe.py", "0.5.5", ("Glm4MoeForCausalLM",)),
    Family("gpt_oss", "gpt_oss.py", "0.5.0rc0", ("GptOssForCausalLM",)),
    Family("deepseek_v2", "deepseek_v2.py", "0.5.5",
           # the last two subclass DeepseekV2ForCausalLM in the releases that have them (0.5.23)
           ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
            "MistralLarge3ForCausalLM", "GlmMoeDsaForCausalLM", "DeepseekV3ForCausalLMNextN",
            "GlmMoeDsaForCausalLMNextN", "MistralLarge3ForCausalLMEagle",
            "Glm5NextForConditionalGenerationNextN")),
    Family("kimi_k25", "kimi_k25.py", "0.5.10", ("KimiK25ForConditionalGeneration",),
           rules_of="deepseek_v2"),
    # GLM-4.7-Flash: inherits DeepseekV2ForCausalLM's method up to 0.5.12.post1, has its own copy
    # of the first-id rule from 0.5.13 (read from the pinned releases by serve/capture_rules.py)
    Family("glm4_moe_lite", "glm4_moe_lite.py", "0.5.9",
           ("Glm4MoeLiteForCausalLM", "Glm4MoeLiteForCausalLMNextN"), rules_of="deepseek_v2"),
)}

_BY_CLASS = {cls: fam for fam in FAMILIES.values() for cls in fam.classes}

# Draft architectures whose fc width counts a *top-level* eagle_aux_hidden_state_layer_ids too
# (0.5.23 models/kimi_k25_eagle3.py `_get_eagle_aux_layer_count`), while the target ignores it.
MLA_DRAFTS = ("Eagle3DeepseekV2ForCausalLM",)


def family_for(class_name: str) -> Family | None:
    return _BY_CLASS.get(class_name)


def _ge(version: str, other: str) -> bool:
    return parse_version(version) >= parse_version(other)


def default_loop(num_layers: int) -> list[int]:
    """SGLang's defaults, used as raw loop indices (no +1): [2, N//2, N-3]."""
    return [2, num_layers // 2, num_layers - 3]


def rule_kind(family: Family, version: str) -> str:
    """plus1 | first_id | max_n: how this family's set_eagle3_layers_to_capture reads config ids."""
    if family.kind:
        return family.kind
    fam = family.rule_family
    if fam == "deepseek_v2" and _ge(version, "0.5.13"):
        return "first_id"
    if fam == "gpt_oss" and _ge(version, "0.5.17"):
        return "max_n"
    return "plus1"


def rule_text(family: Family, version: str) -> str:
    """The config-id rule of this family in this release, in words."""
    kind = rule_kind(family, version)
    if kind == "first_id":
        return "config id k -> loop k+1 if the first id is 1, else loop k (PR #25454)"
    if kind == "max_n":
        return "config ids -> loop ids as-is if max(ids) == num_layers, else +1 (PR #32334)"
    return "config id k -> loop k+1 (output of layer k)"


def config_to_loop(family: Family, version: str, ids: list[int] | None, num_layers: int) -> list[int]:
    """Mirror of ``<Model>.set_eagle3_layers_to_capture(ids)`` -> ``model.layers_to_capture``."""
    if ids is None:
        loops = default_loop(num_layers)
        return [v + 1 for v in loops] if family.shift_defaults else loops
    ids = [int(x) for x in ids]
    kind = rule_kind(family, version)
    if kind == "first_id":
        return [v + 1 for v in ids] if ids and ids[0] == 1 else list(ids)
    if kind == "max_n":
        return list(ids) if ids and max(ids) == num_layers else [v + 1 for v in ids]
    return [v + 1 for v in ids]


def reads_config_ids(version: str) -> bool:
    """0.4.6-0.4.8 never read the draft's ids (defaults everywhere)."""
    return _ge(version, "0.4.9")


def graphs_use_defaults(version: str) -> bool:
    """0.4.9-0.5.10: CudaGraphRunner (and 0.5.6+ _dummy_run) call set_eagle3_layers_to_capture()
    with no args before capture, and the config ids are applied only afterwards."""
    return _ge(version, "0.4.9") and not _ge(version, "0.5.11")


def emb_outcome(family: Family, version: str) -> str:
    """What a capture at loop index 0 (before layer 0, residual still None) does.

    'silent': captures the embedding output without error; 'typeerror': ``hidden + None`` at the
    first forward; 'unknown': not established for this family/release (treated as unsafe).
    """
    fam = family.rule_family
    if family.name == "glm4_moe_lite" and _ge(version, "0.5.13"):
        return "unknown"  # its own forward from 0.5.13: not DeepSeek's, not established
    if fam in ("qwen2", "qwen3"):  # Qwen2Model: `hidden + residual if residual is not None else hidden`
        return "silent"
    if fam == "llama":  # 0.5.22+ layer_boundary capture handles "embeddings precede enter"
        return "silent" if _ge(version, "0.5.22") else "typeerror"
    if fam == "deepseek_v2":  # 0.5.16+ LayerCommunicator.prepare_attn sets residual first
        return "silent" if _ge(version, "0.5.16") else "typeerror"
    if fam == "gpt_oss":
        return "typeerror" if not _ge(version, "0.5.17") else "unknown"
    if fam == "glm4_moe":
        return "typeerror" if not _ge(version, "0.5.21") else "unknown"
    return "unknown"


def final_capturable(family: Family, version: str) -> bool:
    """Loop index == num_layers (output of the last layer) is captured only by gpt_oss 0.5.17+."""
    return rule_kind(family, version) == "max_n"


def config_arch(cfg: dict, what: str) -> str:
    """``architectures[0]`` of a config.json, "" when it has none. UserError(2) for any other
    shape: transformers and SGLang read ``architectures[0]``, so a bare string would be read as
    its first letter."""
    archs = cfg.get("architectures")
    if archs is None or archs == []:
        return ""
    if isinstance(archs, list) and all(isinstance(a, str) for a in archs):
        return archs[0]
    if isinstance(archs, str):
        raise UserError(f"{what} config: 'architectures' is the string {archs!r}; it must be a list, "
                        f"[{archs!r}] (SGLang reads architectures[0]: here {archs[:1]!r})", exit_code=2)
    raise UserError(f"{what} config: 'architectures' must be a list of class names, got {archs!r:.60}",
                    exit_code=2)


def _eagle_config(draft_cfg: dict) -> dict:
    """The draft's ``eagle_config`` object ({} when absent); UserError(2) for another type (SGLang
    calls ``.get`` on it)."""
    eagle = draft_cfg.get("eagle_config")
    if eagle is None:
        return {}
    if not isinstance(eagle, dict):
        raise UserError(f"draft config: eagle_config must be an object, got {type(eagle).__name__} "
                        f"{eagle!r:.40}", exit_code=2)
    return eagle


def _ids(ids: Any, name: str) -> list[int] | None:
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) < 1 << 20
                                            for x in ids):
        raise UserError(f"draft {name} must be a list of integers, got {ids!r:.60}", exit_code=2)
    return list(ids)


def draft_count(draft_cfg: dict, version: str) -> tuple[int, str]:
    """How many aux hidden states the draft's fc expects, and why (section 3.1)."""
    arch = config_arch(draft_cfg, "draft")
    if not _ge(version, "0.5.12"):
        return 3, "fc is always 3 x hidden before SGLang 0.5.12"
    nested = _nested_ids(draft_cfg)
    top = _ids(draft_cfg.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids")
    if arch in MLA_DRAFTS:
        if nested is not None:
            return len(nested), "len(eagle_config.eagle_aux_hidden_state_layer_ids)"
        if top is not None:
            return len(top), "len(top-level eagle_aux_hidden_state_layer_ids) (MLA draft)"
        return 3, "default 3 (no ids in the draft config)"
    n_aux = draft_cfg.get("num_aux_hidden_states")
    if n_aux is not None:
        if not (isinstance(n_aux, int) and not isinstance(n_aux, bool) and 0 < n_aux < 1 << 10):
            raise UserError(f"draft num_aux_hidden_states must be a whole number >= 1, got {n_aux!r:.40}",
                            exit_code=2)
        return n_aux, "num_aux_hidden_states"
    if nested:
        return len(nested), "len(eagle_config.eagle_aux_hidden_state_layer_ids)"
    return 3, "default 3 (no ids in the draft config)"


def _nested_ids(draft_cfg: dict) -> list[int] | None:
    return _ids(_eagle_config(draft_cfg).get("eagle_aux_hidden_state_layer_ids"),
                "eagle_config.eagle_aux_hidden_state_layer_ids")


# --------------------------------------------------------------------------------------------
# Our layers -> config ids


class LayerError(UserError):
    """A requested capture that this family/release cannot produce."""


def ours_to_config(family: Family, version: str, layers: list[Layer], num_layers: int | None) -> list[int]:
    """Config ids that make ``family`` in ``version`` capture exactly ``layers``.

    Capture order is always loop order (``if i in layers_to_capture``), so the list order is free;
    we use it to dodge DeepSeek's 0.5.13+ "first id == 1" heuristic.
    """
    if not reads_config_ids(version):
        raise LayerError(f"SGLang {version} never reads aux layer ids (0.4.6-0.4.8 always capture "
                         "the defaults); upgrade SGLang to choose layers")
    if not _ge(version, family.since):
        raise LayerError(f"{family.name} models support EAGLE-3 only from SGLang {family.since} "
                         f"(this is {version})")
    if len(set(layers)) != len(layers):
        raise LayerError(f"duplicate layers in {format_layers(layers)}")
    loops = sorted(to_loop(x) for x in layers)
    for x in layers:
        if x == EMB:
            outcome = emb_outcome(family, version)
            if outcome != "silent":
                why = ("fails with TypeError at the first forward (residual is None before layer 0)"
                       if outcome == "typeerror" else "is not known to work")
                raise LayerError(f"capturing the embedding output (emb) on {family.name} in SGLang "
                                 f"{version} {why}; drop 'emb'")
    if num_layers:
        for x in layers:
            if x == EMB:
                continue
            k = int(x)
            if k > num_layers - 1:
                raise LayerError(f"layer {k} does not exist: the target has {num_layers} decoder "
                                 f"layers (0..{num_layers - 1})")
            if k == num_layers - 1 and not final_capturable(family, version):
                raise LayerError(f"the output of the last layer ({k}) is never captured by "
                                 f"{family.name} in SGLang {version} (capture happens before each "
                                 f"layer runs); pick layers up to {num_layers - 2}")
    kind = rule_kind(family, version)
    if kind == "first_id":
        ids = list(loops)  # raw, unless the first id is 1
        if ids[0] == 1:
            if len(ids) == 1:
                raise LayerError(f"{family.name} in SGLang {version} cannot capture only the output of "
                                 "layer 0: a first id of 1 switches on +1 (PR #25454)")
            ids = ids[1:] + ids[:1]  # any other first id keeps the ids raw
    elif kind == "max_n" and num_layers and loops[-1] == num_layers:
        ids = list(loops)  # max == num_layers -> raw
    else:
        ids = [v - 1 for v in loops]
    if num_layers:  # self-check against the mirror of SGLang's own rule
        got = sorted(config_to_loop(family, version, ids, num_layers))
        if got != loops:
            raise LayerError(f"{family.name} in SGLang {version} cannot capture {format_layers(layers)}")
    return ids


# --------------------------------------------------------------------------------------------
# Runtime override (called inside set_eagle3_layers_to_capture: source patch and plugin hook)


@functools.lru_cache(maxsize=1)
def _sglang_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        import sys

        mod = sys.modules.get("sglang.version") or sys.modules.get("sglang")
        version = getattr(mod, "__version__", None)
        if not version:
            raise LayerError("cannot tell the running SGLang version for the aux-layer override") from None
        return str(version)


def _model_num_layers(model: Any) -> int | None:
    """num_hidden_layers of a target model instance (text_config for multimodal wrappers)."""
    cfg = getattr(model, "config", None)
    candidates = [cfg, getattr(cfg, "text_config", None)]
    lm = getattr(model, "language_model", None)
    if lm is not None:
        candidates.append(getattr(lm, "config", None))
    for c in candidates:
        n = getattr(c, "num_hidden_layers", None)
        if isinstance(n, int) and n > 0:
            return n
    return None


_logged = False


def _takes_loop_indices(cls: str) -> bool:
    """Inner models whose set_eagle3_layers_to_capture(layers_to_capture) takes loop indices, not
    config ids (0.5.23: Qwen2MoeModel, Qwen3NextModel; qwen3_5.py's Qwen3_5ForCausalLM is named
    like a config-id class, so the caller's parameter name decides there)."""
    if cls.endswith("Model"):
        return True
    import sys

    frame = sys._getframe(2)  # the (patched) set_eagle3_layers_to_capture that called us
    code = frame.f_code
    return (code.co_name == "set_eagle3_layers_to_capture" and code.co_argcount >= 2
            and code.co_varnames[1] == "layers_to_capture")


def override_layer_ids(model: Any, layer_ids: list[int] | None, requested: str | None = None
                       ) -> list[int] | None:
    """Config ids that make ``model`` (this class, in the running SGLang) capture the requested
    layers. ``SGLANG_EAGLE3_AUX_LAYERS`` wins over ``requested``; nothing requested -> ``layer_ids``
    unchanged. The incoming ids are ignored otherwise (idempotent under nested delegation)."""
    text = AUX_LAYERS.get() or requested
    if not text or not str(text).strip():
        return layer_ids
    cls = type(model).__name__
    if _takes_loop_indices(cls):
        return layer_ids  # inner setter (already loop indices from the overridden outer call)
    source = ENV if AUX_LAYERS.is_set() else "--aux-layers"
    wanted = parse_layers(str(text))
    family = family_for(cls)
    if family is None:  # most SGLang models use the +1 rule (section 3.3); say we assumed it
        family = Family("generic(+1)", "?", "0.4.9", (cls,))
    version = _sglang_version()
    num_layers = _model_num_layers(model)
    expected = len(layer_ids) if layer_ids is not None else 3
    if len(wanted) != expected:
        raise LayerError(f"{source}={text} names {len(wanted)} layers but the draft expects "
                         f"{expected} aux hidden states; give exactly {expected}")
    ids = ours_to_config(family, version, wanted, num_layers)
    global _logged
    if not _logged:
        _logged = True
        loops = sorted(to_loop(x) for x in wanted)
        logger.warning(
            "sglang-eagle3-ext: EAGLE-3 aux layers = %s (loop indices %s; config ids %s for %s, "
            "family %s, SGLang %s; from %s)",
            describe(sorted(wanted, key=to_loop)), loops, ids, cls, family.name, version, source)
    return ids



def num_hidden_layers(target_cfg: dict) -> int | None:
    """Decoder layers of a target config (multimodal wrappers keep them in text_config)."""
    for key in ("num_hidden_layers", "num_layers"):  # LongCat-Flash publishes num_layers (its
        # SGLang config class sets num_hidden_layers from it)
        for c in (target_cfg, target_cfg.get("text_config") or {}, target_cfg.get("language_config") or {}):
            n = c.get(key) if isinstance(c, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1 << 16:
                return n
    return None
