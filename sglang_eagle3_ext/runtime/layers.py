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
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError
from .safeparse import json_loads
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
        data = json_loads(f.read_text(encoding="utf-8"))
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
            "MistralLarge3ForCausalLM", "GlmMoeDsaForCausalLM")),
    Family("kimi_k25", "kimi_k25.py", "0.5.10", ("KimiK25ForConditionalGeneration",),
           rules_of="deepseek_v2"),
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


def rule_text(family: Family, version: str) -> str:
    """The config-id rule of this family in this release, in words."""
    fam = family.rule_family
    if fam == "deepseek_v2" and _ge(version, "0.5.13"):
        return "config id k -> loop k+1 if the first id is 1, else loop k (PR #25454)"
    if fam == "gpt_oss" and _ge(version, "0.5.17"):
        return "config ids -> loop ids as-is if max(ids) == num_layers, else +1 (PR #32334)"
    return "config id k -> loop k+1 (output of layer k)"


def config_to_loop(family: Family, version: str, ids: list[int] | None, num_layers: int) -> list[int]:
    """Mirror of ``<Model>.set_eagle3_layers_to_capture(ids)`` -> ``model.layers_to_capture``."""
    if ids is None:
        return default_loop(num_layers)
    ids = [int(x) for x in ids]
    fam = family.rule_family
    if fam == "deepseek_v2" and _ge(version, "0.5.13"):
        return [v + 1 for v in ids] if ids and ids[0] == 1 else list(ids)
    if fam == "gpt_oss" and _ge(version, "0.5.17"):
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
    return family.rule_family == "gpt_oss" and _ge(version, "0.5.17")


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
    fam = family.rule_family
    if fam == "deepseek_v2" and _ge(version, "0.5.13"):
        ids = list(loops)  # raw, unless the first id is 1
        if ids[0] == 1:
            if len(ids) == 1:
                raise LayerError(f"deepseek_v2 in SGLang {version} cannot capture only the output of "
                                 "layer 0: a first id of 1 switches on +1 (PR #25454)")
            ids = ids[1:] + ids[:1]  # any other first id keeps the ids raw
    elif fam == "gpt_oss" and _ge(version, "0.5.17") and num_layers and loops[-1] == num_layers:
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


# --------------------------------------------------------------------------------------------
# `layers check`: what a target/draft pair will capture in one release, and what is wrong


@dataclass
class Problem:
    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"problem": self.what, "fix": self.fix}


@dataclass
class CheckReport:
    version: str
    target_arch: str
    family: str
    num_layers: int
    draft_arch: str
    nested_ids: list[int] | None
    top_level_ids: list[int] | None
    rule: str
    prefill_loop: list[int]
    decode_loop: list[int]
    draft_count: int
    draft_count_from: str
    trained_on: list[Layer] | None
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def _ours(self, loops: list[int]) -> list[Layer | None]:
        """Our layers; None for an index the loop never reaches."""
        final_ok = final_capturable(FAMILIES[self.family], self.version)
        return [None if loop_label(i, self.num_layers, final_ok).startswith("never") else from_loop(i)
                for i in loops]

    @property
    def prefill(self) -> list[Layer | None]:
        return self._ours(self.prefill_loop)

    @property
    def decode(self) -> list[Layer | None]:
        return self._ours(self.decode_loop)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sglang_version": self.version,
            "target": {"architecture": self.target_arch, "family": self.family,
                       "num_hidden_layers": self.num_layers},
            "draft": {"architecture": self.draft_arch,
                      "eagle_config.eagle_aux_hidden_state_layer_ids": self.nested_ids,
                      "top_level_eagle_aux_hidden_state_layer_ids": self.top_level_ids,
                      "expected_count": self.draft_count, "expected_count_from": self.draft_count_from},
            "rule": self.rule,
            "capture": {
                "prefill": {"layers": self.prefill, "loop_indices": self.prefill_loop},
                "decode": {"layers": self.decode, "loop_indices": self.decode_loop},
            },
            "trained_on": self.trained_on,
            "problems": [p.to_dict() for p in self.problems],
            "notes": self.notes,
        }


def num_hidden_layers(target_cfg: dict) -> int | None:
    """Decoder layers of a target config (multimodal wrappers keep them in text_config)."""
    for c in (target_cfg, target_cfg.get("text_config") or {}, target_cfg.get("language_config") or {}):
        n = c.get("num_hidden_layers") if isinstance(c, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1 << 16:
            return n
    return None


def _layer_word(loop: int, num_layers: int) -> str:
    if loop == 0:
        return "the embedding output (emb)"
    if loop < 0:
        return f"loop index {loop} (never reached)"
    if loop > num_layers:
        return f"loop index {loop} (past the last layer, never reached)"
    return f"output of layer {loop - 1}"


def _fix_ids(family: Family, version: str, layers: list[Layer], num_layers: int) -> str:
    try:
        ids = ours_to_config(family, version, layers, num_layers)
    except LayerError as exc:
        return f"(no config ids can do it: {exc})"
    return (f"set eagle_config.eagle_aux_hidden_state_layer_ids to {ids} in the draft config.json, "
            f"or run with {ENV}={format_layers(layers)} (sgl-eagle3 launch --aux-layers "
            f"{format_layers(layers)})")


def check(target_cfg: dict, draft_cfg: dict, version: str,
          trained_on: list[Layer] | None = None, aux_layers: list[Layer] | None = None) -> CheckReport:
    """What ``version`` will capture for this target/draft pair, and every problem with a fix.

    ``aux_layers``: the capture `launch --aux-layers` (SGLANG_EAGLE3_AUX_LAYERS) asks for; our
    override wraps the model's own set_eagle3_layers_to_capture, so prefill and decode (graphs
    included) capture exactly those layers, whatever the draft config says."""
    arch = config_arch(target_cfg, "target")
    family = family_for(arch)
    if family is None:
        known = ", ".join(sorted(_BY_CLASS))
        raise UserError(f"target architecture {arch or '(none)'!r} is not one we know the aux-layer "
                        f"rule for; known: {known}", exit_code=2)
    n = num_hidden_layers(target_cfg)
    if n is None:
        raise UserError("target config has no num_hidden_layers (nor text_config.num_hidden_layers)",
                        exit_code=2)
    nested = _nested_ids(draft_cfg)
    top = draft_cfg.get("eagle_aux_hidden_state_layer_ids")
    for name, ids in (("eagle_config.eagle_aux_hidden_state_layer_ids", nested),
                      ("eagle_aux_hidden_state_layer_ids", top)):
        if ids is not None and (not isinstance(ids, list)
                                or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids)):
            raise UserError(f"draft {name} must be a list of integers, got {ids!r}", exit_code=2)
    draft_arch = config_arch(draft_cfg, "draft")
    count, count_from = draft_count(draft_cfg, version)

    # What the release reads: only the nested key feeds the target (section 3.1).
    if aux_layers is not None:
        prefill = decode = [to_loop(x) for x in aux_layers]
    elif not reads_config_ids(version):
        prefill = decode = default_loop(n)
    else:
        prefill = config_to_loop(family, version, nested, n)
        decode = default_loop(n) if graphs_use_defaults(version) else prefill
    rep = CheckReport(version, arch, family.name, n, draft_arch, nested, top,
                      rule_text(family, version), prefill, decode, count, count_from, trained_on)
    P = rep.problems.append

    if not _ge(version, family.since):
        P(Problem(f"{arch} has no set_eagle3_layers_to_capture in SGLang {version} (EAGLE-3 on "
                  f"{family.name} starts at {family.since})",
                  f"use SGLang >= {family.since}"))
        return rep

    if aux_layers is not None:
        rep.rule = f"--aux-layers {format_layers(aux_layers)} (our override; the draft config's ids are not used)"
    elif not reads_config_ids(version):
        rep.notes.append(f"SGLang {version} never reads the draft's layer ids: it captures the "
                         f"defaults {describe([from_loop(i) for i in prefill])} everywhere")
    if _eagle_config(draft_cfg).get("use_aux_hidden_state") is False:
        rep.notes.append("eagle_config.use_aux_hidden_state is false: the draft takes the last hidden "
                         "state, no aux layers are captured")

    # Top-level vs nested key.
    if top is not None and nested is None:
        P(Problem("the draft has only a top-level eagle_aux_hidden_state_layer_ids "
                  f"{top}; the target ignores it and captures the defaults "
                  f"{describe([from_loop(i) for i in default_loop(n)])}"
                  + (" while the MLA draft sizes fc from it" if draft_arch in MLA_DRAFTS else ""),
                  f"move it under eagle_config: \"eagle_config\": "
                  f"{{\"eagle_aux_hidden_state_layer_ids\": {top}}}"))
    elif top is not None and nested is not None and list(top) != list(nested):
        P(Problem(f"top-level eagle_aux_hidden_state_layer_ids {top} differs from "
                  f"eagle_config.eagle_aux_hidden_state_layer_ids {nested}; only the nested one "
                  "drives the target",
                  "delete the top-level key or make it equal to the nested one"))

    # Each capture path on its own: ids that are never reached, embedding, count.
    paths = [("prefill", prefill)] if prefill == decode else [("prefill", prefill), ("decode", decode)]
    final_ok = final_capturable(family, version)
    for name, loops in paths:
        label = "" if len(paths) == 1 else f" ({name})"
        if len(set(loops)) != len(loops):
            P(Problem(f"duplicate capture indices {loops}{label}: one layer is captured once, so "
                      "fewer features than ids reach the draft", "remove the duplicate id"))
        unreached = [i for i in loops if i < 0 or i > n or (i == n and not final_ok)]
        happen = f"{len(set(loops)) - len(unreached)} of {len(loops)} captures happen"
        fix_unreached = (_fix_ids(family, version, trained_on, n) if trained_on
                         else f"keep every capture index in 1..{n - 1} (outputs of layers 0..{n - 2})")
        if any(i < 0 for i in unreached):
            trained = (f"; the draft was trained on {describe(trained_on)}" if trained_on else "")
            negs = [i for i in unreached if i < 0]
            P(Problem(f"a negative config id asks for the embedding output (emb){trained} (-1 means emb "
                      f"only under a +1 rule), but here {rep.rule}, so it becomes loop index "
                      f"{format_layers(negs)}, which is never reached{label}: {happen}",
                      fix_unreached))
        past = [i for i in unreached if i >= 0]
        if past:
            ids_txt = nested if name == "prefill" or not graphs_use_defaults(version) else None
            P(Problem(f"capture indices {past}{label} are never reached on a {n}-layer target "
                      f"(config ids {ids_txt}; {rep.rule}): "
                      + ", ".join(_layer_word(i, n) for i in past) + f"; {happen}",
                      fix_unreached))
        if 0 in loops and not (trained_on and EMB in trained_on):
            outcome = emb_outcome(family, version)
            effect = {"silent": "it is captured silently (wrong features, low acceptance, no error)",
                      "typeerror": "it fails with TypeError at the first forward (residual is None)",
                      "unknown": "its behaviour here is not established"}[outcome]
            trained = (f"the draft was trained on {describe(trained_on)}" if trained_on
                       else "EAGLE-3 drafts are normally trained on decoder-layer outputs only")
            P(Problem(f"the capture{label} includes the embedding output (emb, config id "
                      f"{-1 if family.rule_family != 'deepseek_v2' or not _ge(version, '0.5.13') else 0})"
                      f": {trained}; {effect}",
                      _fix_ids(family, version, trained_on, n) if trained_on
                      else "drop the embedding id, or pass --trained-on emb,... if the draft was "
                           "trained on it"))
        reached = len({i for i in loops if 0 <= i < n or (i == n and final_ok)})
        if reached != count:
            how = (f"'captured {reached} of {len(loops)} aux hidden states' (0.5.17+) or a shape "
                   "error at the first forward" if reached != len(loops)
                   else "a shape error in the draft's fc at the first forward")
            P(Problem(f"{reached} hidden states are captured{label} but the draft's fc expects "
                      f"{count} ({count_from}): {how}",
                      f"use exactly {count} ids that are reached"))
        if trained_on is not None and sorted(loops) != sorted(to_loop(x) for x in trained_on):
            reached_l = [from_loop(i) for i in sorted(loops) if 0 <= i < n or (i == n and final_ok)]
            lost = len(loops) - len(reached_l)
            P(Problem(f"SGLang {version} captures {describe(reached_l)}"
                      + (f" (+{lost} id(s) never reached)" if lost else "")
                      + f"{label}, but the draft was trained on "
                      f"{describe(sorted(trained_on, key=to_loop))}",
                      _fix_ids(family, version, trained_on, n) if name == "prefill"
                      or not graphs_use_defaults(version) else
                      "decode/verify CUDA graphs here always capture the defaults: run with "
                      "--disable-cuda-graph, or patch the no-arg calls (sgl-eagle3 patch apply "
                      f"--aux-layers {format_layers(trained_on)}), or use SGLang >= 0.5.11"))

    if graphs_use_defaults(version) and prefill != decode and trained_on is None:
        P(Problem(f"SGLang {version} captures its CUDA graphs (decode, target verify) with the default "
                  f"layers {describe(rep.decode)} but eager prefill uses the config ids "
                  f"({describe([x for x in rep.prefill if x is not None])}): the draft sees different features in prefill and "
                  "decode",
                  "make the config ids equal the defaults "
                  f"({_fix_ids(family, version, rep.decode, n)}), or run with "
                  "--disable-cuda-graph, or patch the no-arg calls (sgl-eagle3 patch apply "
                  "--aux-layers ...), or use SGLang >= 0.5.11"))
    # Problems found on both paths read the same; keep one.
    seen: set[str] = set()
    rep.problems = [p for p in rep.problems if not (p.what in seen or seen.add(p.what))]
    return rep
