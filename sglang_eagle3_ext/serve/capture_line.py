"""`launch`'s capture line: which target layers will feed the EAGLE-3 draft, in our words
("output of decoder layer k", ``emb``), and a warning when that contradicts the layers the draft
was trained on (``--trained-on`` of `tiny`, recorded in the ``tiny.json`` beside the draft).

A user who never runs `layers check` still sees the wiring before the server starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.layers import _local_config, format_layers, from_loop, parse_layers
from ..runtime.safeparse import CONFIG_LIMIT, json_loads, read_text


def recorded_training(draft: Any) -> tuple[list | None, str]:
    """(layers, where) the draft's training layers were recorded, or (None, '')."""
    if not draft:
        return None, ""
    f = Path(str(draft)).expanduser().parent / "tiny.json"
    try:
        info = json_loads(read_text(f, what="a tiny.json record", limit=CONFIG_LIMIT), strict=False)
    except (OSError, ValueError):
        return None, ""
    if not isinstance(info, dict) or not isinstance(info.get("trained_on"), list):
        return None, ""
    try:
        return parse_layers(",".join(str(x) for x in info["trained_on"])), str(f)
    except UserError:
        return None, ""


def _ours(loops: list[int], n: int) -> str:
    return ",".join("never" if i < 0 or i > n else str(from_loop(i)) for i in loops)


def capture_notes(model: Any, draft: Any, version: str, aux_layers: str | None,
                  package_dir: str | None = None, trained_on: str | None = None) -> list[str]:
    """The capture line (and warnings) for an EAGLE-3 launch; [] when a config is not local.

    ``trained_on`` (launch --trained-on): a capture that differs is refused (UserError, exit 2)
    before anything starts; a recorded one (tiny.json) only warns, as the record may be stale."""
    from .capture_rules import pinned
    from .layer_check import check

    if version in pinned():
        package_dir = None  # the generated table of that release: no source reading at launch
    given = parse_layers(trained_on) if trained_on else None  # bad syntax: exit 2 even for hub ids
    target_cfg, draft_cfg = _local_config(model), _local_config(draft)
    if target_cfg is None or draft_cfg is None:
        return []
    trained, where = (given, "--trained-on") if given is not None else recorded_training(draft)
    try:
        aux = parse_layers(aux_layers) if aux_layers else None
        rep = check(target_cfg, draft_cfg, version, trained, aux, package_dir=package_dir)
    except UserError as exc:
        return [f"EAGLE-3 capture: not judged ({exc})"]
    if rep.fam is None:
        return [f"EAGLE-3 capture: {rep.problems[0].what}"]
    n = rep.num_layers
    if aux is not None:
        src = f"--aux-layers {format_layers(aux)}"
    elif rep.nested_ids is not None:
        src = f"draft ids {rep.nested_ids}, {rep.rule}"
    else:
        src = "SGLang's defaults (no ids in the draft config)"
    line = (f"EAGLE-3 capture (SGLang {version}, {rep.target_arch}): outputs of decoder layers "
            f"{_ours(rep.prefill_loop, n)} (emb = embedding; loop / HF indices "
            f"{format_layers(rep.prefill_loop)}) from {src}")
    if rep.decode_loop != rep.prefill_loop:
        line += f"; decode CUDA graphs capture {_ours(rep.decode_loop, n)} (the defaults)"
    out = [line]
    if trained is not None:
        out[0] += f"; trained on {format_layers(trained)} " + (
            "(--trained-on)" if trained_on else f"(recorded in {where})")
        wrong = [p for p in rep.problems if "but the draft was trained on" in p.what]
        if trained_on and wrong:
            raise UserError(f"--trained-on {trained_on}: {wrong[0].what}; fix: {wrong[0].fix}", exit_code=2)
    if rep.ambiguity:
        out.append("warning: " + rep.ambiguity)
    for p in rep.problems:
        out.append(f"warning: {p.what}; fix: {p.fix}")
    if rep.problems:
        out.append("warning: `sgl-eagle3 layers check --target MODEL --draft DRAFT` explains the "
                   "capture in full")
    return out
