"""`sgl-eagle3 layers check`: what an SGLang release will capture for a target / draft pair, every wiring problem with its fix (the rules are runtime/layers.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError
from ..runtime.layers import (
    _BY_CLASS,
    EMB,
    ENV,
    FAMILIES,
    MLA_DRAFTS,
    Family,
    Layer,
    LayerError,
    _eagle_config,
    _ge,
    _nested_ids,
    config_arch,
    config_to_loop,
    default_loop,
    describe,
    draft_count,
    emb_outcome,
    family_for,
    final_capturable,
    format_layers,
    from_loop,
    graphs_use_defaults,
    loop_label,
    num_hidden_layers,
    ours_to_config,
    reads_config_ids,
    rule_text,
    to_loop,
)

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
          trained_on: list[Layer] | None = None, aux_layers: list[Layer] | None = None,
          aux_from: str | None = None) -> CheckReport:
    """What ``version`` will capture for this target/draft pair, and every problem with a fix.

    ``aux_layers``: the capture `launch --aux-layers` (SGLANG_EAGLE3_AUX_LAYERS) asks for; our
    override wraps the model's own set_eagle3_layers_to_capture, so prefill and decode (graphs
    included) capture exactly those layers, whatever the draft config says. ``aux_from``: where
    they came from when not ``--aux-layers`` (an exported variable), named in the rule line."""
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
        rep.rule = f"{aux_from or '--aux-layers ' + format_layers(aux_layers)} (our override; the draft config's ids are not used)"
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
