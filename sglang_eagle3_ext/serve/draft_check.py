"""The draft side of `layers check`, per release: can the release load the draft class, does it
honour the draft's EAGLE-3.1 fields, do the vocab sizes fit; and --target / --draft swapped.

What a release loads and reads comes from its own models/*.py (capture_rules)."""

from __future__ import annotations

from typing import Any

from ..runtime.errors import UserError
from . import capture_rules


def _is_draft(arch: str) -> bool:
    return "Eagle3" in arch or any(arch in t.drafts for t in capture_rules.pinned().values())


def _is_target(arch: str) -> bool:
    return any(arch in t.targets for t in capture_rules.pinned().values())


def check_swapped(target_arch: str, draft_arch: str, target_cfg: dict, draft_cfg: dict) -> None:
    """One line (exit 2) when the draft was given as --target (and the target as --draft), or a
    model SGLang serves as a target (an MTP / EAGLE-1 head included) was given as --draft."""
    if not _is_draft(target_arch):
        if draft_arch and not _is_draft(draft_arch) and _is_target(draft_arch):
            raise UserError(f"--draft is {draft_arch}, a model SGLang serves as a target, not an "
                            "EAGLE-3 draft (its class names end in Eagle3); give the EAGLE-3 draft "
                            "folder", exit_code=2)
        return
    if draft_arch and not _is_draft(draft_arch):
        raise UserError(f"--target is an EAGLE-3 draft ({target_arch}) and --draft is a target model "
                        f"({draft_arch}): --target and --draft are swapped", exit_code=2)
    raise UserError(f"--target is an EAGLE-3 draft ({target_arch}); --target must be the model the "
                    "draft was trained for", exit_code=2)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _vocab(cfg: dict) -> int | None:
    for c in (cfg, cfg.get("text_config") or {}, cfg.get("language_config") or {}):
        if isinstance(c, dict) and _int(c.get("vocab_size")):
            return c["vocab_size"]
    return None


def _first(pred) -> str:
    hits = capture_rules.first_release(pred)
    return hits[0] if hits else ""


def check_draft(draft_cfg: dict, target_cfg: dict, draft_arch: str, version: str,
                package_dir: str | None = None) -> list[tuple[str, str]]:
    """(problem, fix) pairs for the draft in this release."""
    out: list[tuple[str, str]] = []
    table, _ = capture_rules.table_for(version, package_dir)
    cls = table.drafts.get(draft_arch)
    if draft_arch and cls is None and (_is_draft(draft_arch) or not _is_target(draft_arch)):
        first = _first(lambda t: draft_arch in t.drafts)
        loads = ", ".join(sorted(table.drafts)) or "none"
        out.append((f"SGLang {version} cannot load the draft class {draft_arch} (EAGLE-3 draft classes "
                    f"it loads: {loads})",
                    f"use SGLang >= {first}" if first and capture_rules.newer(first, version) else
                    "no supported SGLang release loads it: export the draft as a class the release "
                    f"loads ({loads})"))
    eagle = draft_cfg.get("eagle_config") if isinstance(draft_cfg.get("eagle_config"), dict) else {}
    for name in capture_rules.EAGLE31_FIELDS:
        value = draft_cfg.get(name, eagle.get(name))
        if not value or cls is None or name in cls.reads:
            continue
        first = _first(lambda t, n=name: (d := t.drafts.get(draft_arch)) is not None and n in d.reads)
        out.append((f"the draft config sets {name}={value!r} (EAGLE-3.1), but {draft_arch} in SGLang "
                    f"{version} never reads it: the draft runs without it and acceptance drops",
                    f"use SGLang >= {first}, the first supported release whose {cls.where} reads "
                    f"{name}" if first else f"no supported release honours {name} for {draft_arch}"))
    d_vocab, t_vocab = _vocab(draft_cfg), _vocab(target_cfg)
    small = _int(draft_cfg.get("draft_vocab_size"))
    if d_vocab and t_vocab and d_vocab != t_vocab:
        out.append((f"the draft's vocab_size {d_vocab} differs from the target's {t_vocab}: target "
                    "token ids index the draft's embedding", "use the draft trained for this target "
                    "(its vocab_size must equal the target's)"))
    if small and d_vocab and small > d_vocab:
        out.append((f"the draft's draft_vocab_size {small} is larger than its vocab_size {d_vocab}: "
                    "d2t cannot map draft tokens into the target vocabulary",
                    "draft_vocab_size must be at most vocab_size (d2t maps draft ids to target ids)"))
    return out
