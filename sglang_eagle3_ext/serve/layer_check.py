"""`sgl-eagle3 layers check`: what an SGLang release will capture for a target / draft pair, every wiring problem with its fix (the rules are runtime/layers.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..runtime.errors import UserError
from ..runtime.layers import (
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
    rule_kind,
    rule_text,
    to_loop,
)
from . import capture_rules
from .draft_check import check_draft, check_swapped

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
    fam: Family | None = None
    source: str = ""  # the method that decides, and the delegation chain, when read from source
    ambiguity: str = ""  # the readings line (empty: one reading, or --trained-on given)

    @property
    def ok(self) -> bool:
        return not self.problems

    def _ours(self, loops: list[int]) -> list[Layer | None]:
        """Our layers; None for an index the loop never reaches."""
        final_ok = final_capturable(self.fam or FAMILIES[self.family], self.version)
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
            "rule_source": self.source,
            "ambiguity": self.ambiguity or None,
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
        later = _later_release(family, version, num_layers, layers=layers)
        return (f"use {later} (no config ids can do it in SGLang {version}: {exc})" if later
                else f"(no config ids can do it: {exc})")
    return (f"set eagle_config.eagle_aux_hidden_state_layer_ids to {ids} in the draft config.json, "
            f"or run with {ENV}={format_layers(layers)} (sgl-eagle3 launch --aux-layers "
            f"{format_layers(layers)})")


# Releases where a rule changed (reference version map 3.3): 0.5.13 DeepSeek's first-id rule,
# 0.5.17 gpt-oss boundary ids, 0.5.22 llama/qwen2 embedding capture; with the pinned ones.
_BOUNDARIES = ("0.5.11", "0.5.13", "0.5.16", "0.5.17", "0.5.22")
_RULE_PR = {"max_n": "sglang PR #32334, fixing issue #32226", "first_id": "sglang PR #25454"}


def _later_release(family: Family, version: str, n: int, *, layers: list[Layer] | None = None,
                   ids: list[int] | None = None) -> str:
    """'SGLang >= X (...)': the first later release where the wanted ``layers`` can be captured
    (or where every one of the draft's ``ids`` is reached); '' when none."""
    hand = family_for(family.classes[0]) if family.classes else None
    cands = sorted({*capture_rules.pinned(), *_BOUNDARIES}, key=_release_key)
    for v in (c for c in cands if _release_key(c) > _release_key(version)):
        if hand is not None:
            fam = hand
        else:
            cap = capture_rules.table_for(v)[0].get(family.classes[0])
            if cap is None or cap.rule not in capture_rules.RULES:
                continue
            fam = replace(family, kind=cap.rule, shift_defaults=cap.shift_defaults)
        try:
            if layers is not None:
                new_ids = ours_to_config(fam, v, layers, n)
                how = f"with eagle_config.eagle_aux_hidden_state_layer_ids {new_ids}"
            else:
                loops = config_to_loop(fam, v, ids, n)
                final_ok = final_capturable(fam, v)
                if any(i < 0 or i > n or (i == n and not final_ok) for i in loops):
                    continue
                how = f"which reads these ids as {describe([from_loop(i) for i in sorted(loops)])}"
        except LayerError:
            continue
        pr = _RULE_PR.get(rule_kind(fam, v), "") if rule_kind(fam, v) != rule_kind(family, version) else ""
        return f"SGLang >= {v}, {how}" + (f" ({pr})" if pr else "")
    return ""


def _span(versions: list[str], current: str, everyone: list[str]) -> str:
    """'SGLang <= 0.5.12.post1', 'SGLang 0.5.13 - 0.5.16', 'SGLang >= 0.5.19': a group of releases
    that read the ids alike, among ``everyone`` (oldest first) that serve the class."""
    lo, hi = versions[0], versions[-1]
    if len(versions) == len(everyone):
        text = "every supported SGLang release"
    elif lo == everyone[0]:
        text = f"SGLang <= {hi}"
    elif hi == everyone[-1]:
        text = f"SGLang >= {lo}"
    else:
        text = f"SGLang {lo}" if lo == hi else f"SGLang {lo} - {hi}"
    return text + (f" (this release, {current})" if current in versions else "")


def _released(arch: str) -> list[str]:
    """Pinned releases whose own code captures aux hidden states for ``arch``."""
    return capture_rules.first_release(
        lambda t: (c := t.get(arch)) is not None and c.rule in capture_rules.RULES)


def resolve_family(arch: str, version: str, package_dir: str | None = None
                   ) -> tuple[Family | None, str, Problem | None, list[str]]:
    """(family, source text, problem, notes) for a target class in one release.

    The rule comes from the release's own ``set_eagle3_layers_to_capture`` (capture_rules); the
    hand families of runtime/layers.py add what one method does not show (embedding behaviour,
    first release). No family: the problem says why (not served, served without EAGLE-3, a
    method this reader cannot name)."""
    table, note = capture_rules.table_for(version, package_dir)
    notes = [note] if note else []
    cap = table.get(arch)
    hand = family_for(arch)
    source = ""
    if cap is not None and cap.rule in capture_rules.RULES:
        source = cap.where + (f" via {cap.via}" if cap.via else "")
    if hand is not None:
        if cap is not None and cap.rule in capture_rules.RULES and not note:
            hand = replace(hand, kind=cap.rule)  # the release's own code decides
        return hand, source, None, notes
    ok = _released(arch)
    later = f"use SGLang >= {ok[0]} (the first supported release whose code captures them)" if ok else ""
    if cap is None:
        if not ok and not any(arch in t.served for t in capture_rules.pinned().values()):
            raise UserError(f"target architecture {arch or '(none)'!r} is not served by SGLang {version} "
                            "nor by any supported release (no models/*.py registers it in EntryClass)",
                            exit_code=2)
        return None, "", Problem(f"SGLang {version} does not serve {arch}", later or
                                 f"no supported release serves {arch} with EAGLE-3"), notes
    if cap.rule == "none":
        return None, "", Problem(
            f"SGLang {version} serves {arch} without EAGLE-3: its class has no "
            "set_eagle3_layers_to_capture, so no aux hidden states are captured (SGLang refuses "
            "EAGLE3 at start)",
            later or f"no supported release captures aux hidden states for {arch}; pick a target "
                     "SGLang serves with EAGLE-3 (sgl-eagle3 layers families)"), notes
    if cap.rule == "unknown":
        return None, "", Problem(f"no verdict for {arch} in SGLang {version}: {cap.why}",
                                 f"judge it by reading {cap.where or 'its model file'}"), notes
    stem = cap.where.split(".py", 1)[0] or arch
    fam = Family(stem, cap.where.split(":", 1)[0], ok[0] if ok else version, (arch,),
                 kind=cap.rule, shift_defaults=cap.shift_defaults)
    if not _ge(version, fam.since):
        fam = replace(fam, since=version)
    return fam, source, None, notes


def readings(family: Family, version: str, arch: str, ids: list[int] | None, n: int
             ) -> list[tuple[tuple[Layer | None, ...], list[str]]]:
    """The layers each reader takes the draft's ids for: every supported release that serves
    ``arch`` with EAGLE-3 (its own rule), this release, and the two conventions in use."""
    def ours(loops: list[int], final_ok: bool) -> tuple[Layer | None, ...]:
        return tuple(sorted((None if loop_label(i, n, final_ok).startswith("never") else from_loop(i)
                             for i in loops), key=lambda x: -2 if x is None else to_loop(x)))

    groups: dict[tuple, list[str]] = {}
    tables = capture_rules.pinned()
    hand = family_for(arch)  # its rule is known per release: add the releases where rules changed
    versions = sorted({*tables, version, *(_BOUNDARIES if hand else ())}, key=_release_key)
    for v in versions:
        if v == version:
            fam = family
        elif v not in tables:
            fam = hand
        else:
            cap = tables[v].get(arch)
            if cap is None or cap.rule not in capture_rules.RULES:
                continue
            fam = replace(family, kind=cap.rule, shift_defaults=cap.shift_defaults)
        if not reads_config_ids(v) or not _ge(v, fam.since):
            continue
        groups.setdefault(ours(config_to_loop(fam, v, ids, n), final_capturable(fam, v)), []).append(v)
    everyone = sorted((v for vs in groups.values() for v in vs), key=_release_key)
    out = [(k, [_span(vs, version, everyone)]) for k, vs in groups.items()]
    conventions = [
        ("trainers that number layer outputs ('output of layer k')",
         [i + 1 for i in ids] if ids is not None else default_loop(n)),
        ("vLLM and trainers that capture before layer k (HF hidden_states[k])",
         list(ids) if ids is not None else default_loop(n)),
    ]
    for who, loops in conventions:
        key = ours(loops, True)
        for k, names in out:
            if k == key:
                names.append(who)
                break
        else:
            out.append((key, [who]))
    return out


def _release_key(v: str):
    from ..runtime.sglang_env import parse_version

    return parse_version(v)


def _words(layers_: tuple[Layer | None, ...]) -> str:
    lost = sum(1 for x in layers_ if x is None)
    text = describe([x for x in layers_ if x is not None])
    return text + (f" (+{lost} never reached)" if lost else "")


def ambiguity_line(family: Family, version: str, arch: str, ids: list[int] | None, n: int) -> str:
    """One line naming the readings of the draft's ids, or '' when every reader agrees."""
    reads = readings(family, version, arch, ids, n)
    if len(reads) < 2:
        return ""
    parts = [f"{_words(k)} on {' and '.join(names)}" for k, names in reads]
    full = [k for k, _ in reads if k and None not in k]  # readings that reach every id
    options = " or ".join(f"--trained-on {format_layers(list(k))}" for k in full[:3]) or "--trained-on"
    shown = "the draft has no ids; the defaults mean " if ids is None else f"the draft's ids {list(ids)} mean "
    return (shown + "; ".join(parts) + ". The config does not say which "
            f"the draft was trained on: pass {options} (or --trained-on-hf with the training tool's "
            f"hidden_states indices); judged here as SGLang {version} reads them")


def check(target_cfg: dict, draft_cfg: dict, version: str,
          trained_on: list[Layer] | None = None, aux_layers: list[Layer] | None = None,
          aux_from: str | None = None, *, package_dir: str | None = None,
          strict: bool = False) -> CheckReport:
    """What ``version`` will capture for this target/draft pair, and every problem with a fix.

    ``aux_layers``: the capture `launch --aux-layers` (SGLANG_EAGLE3_AUX_LAYERS) asks for; our
    override wraps the model's own set_eagle3_layers_to_capture, so prefill and decode (graphs
    included) capture exactly those layers, whatever the draft config says. ``aux_from``: where
    they came from when not ``--aux-layers`` (an exported variable), named in the rule line. ``package_dir``: the
    release's source tree (its rules are read from it; default the pinned tables). ``strict``:
    ids that readers take for different layers are a problem, not a warning."""
    arch = config_arch(target_cfg, "target")
    draft_arch = config_arch(draft_cfg, "draft")
    check_swapped(arch, draft_arch, target_cfg, draft_cfg)
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
    count, count_from = draft_count(draft_cfg, version)
    family, source, blocker, pre_notes = resolve_family(arch, version, package_dir)
    if family is None:
        rep = CheckReport(version, arch, "-", n, draft_arch, nested, top, "-", [], [], count,
                          count_from, trained_on, [blocker], pre_notes)
        for what, fix in check_draft(draft_cfg, target_cfg, draft_arch, version, package_dir):
            rep.problems.append(Problem(what, fix))
        return rep
    # What the release reads: only the nested key feeds the target (section 3.1).
    if aux_layers is not None:
        prefill = decode = [to_loop(x) for x in aux_layers]
    elif not reads_config_ids(version):
        prefill = decode = config_to_loop(family, version, None, n)
    else:
        prefill = config_to_loop(family, version, nested, n)
        decode = default_loop(n) if graphs_use_defaults(version) else prefill
    rep = CheckReport(version, arch, family.name, n, draft_arch, nested, top,
                      rule_text(family, version), prefill, decode, count, count_from, trained_on,
                      notes=pre_notes, fam=family, source=source)
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
                  f"{describe([from_loop(i) for i in config_to_loop(family, version, None, n)])}"
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
        later = "" if trained_on or aux_layers is not None else _later_release(family, version, n, ids=nested)
        fix_unreached = (_fix_ids(family, version, trained_on, n) if trained_on
                         else f"use {later}, or keep every capture index in 1..{n - 1}" if later
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
                      f"{0 if rule_kind(family, version) == 'first_id' else -1})"
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
    if trained_on is None and aux_layers is None and reads_config_ids(version):
        rep.ambiguity = ambiguity_line(family, version, arch, nested, n)
        if rep.ambiguity and strict:
            P(Problem(rep.ambiguity, "pass --trained-on (or --trained-on-hf); --strict makes "
                      "ambiguous ids fail"))
    for what, fix in check_draft(draft_cfg, target_cfg, draft_arch, version, package_dir):
        P(Problem(what, fix))
    # Problems found on both paths read the same; keep one.
    seen: set[str] = set()
    rep.problems = [p for p in rep.problems if not (p.what in seen or seen.add(p.what))]
    return rep
