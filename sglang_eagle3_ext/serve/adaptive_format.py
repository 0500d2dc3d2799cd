"""SGLang's adaptive speculation config format: its one home (launch, scan, the writer, the policy).

What the release in use accepts, read from its own source, never guessed from a version number
alone where the source can say:

- the **format** (``tiers`` from 0.5.13: ``{"1": {"candidate_steps": [..]}, "8": ...}``, a batch
  routed to the largest key <= its size; ``flat`` in 0.5.12.post1: one ``{"candidate_steps": [..]}``
  for every batch size), decided by which loader ``speculative/adaptive_spec_params.py`` defines;
- the **release loader check**: that loader, executed from the tree's source (no SGLang import), so
  a written file is read back exactly as the server will read it;
- whether **step 0** (no speculation) is a candidate (asked of the loader itself: 0.5.16+);
- the **start-step rule** (``launch_steps``): start at the largest candidate;
- whether one server can **hold** step counts on a schedule (``hold_support``): tiers and the
  forward-side ``activate_step_by_batch`` call, i.e. 0.5.13+ (../shared reference:
  sglang-adaptive-runtime.md).

Workbench side: reads files and SGLang source; imported by flags, adaptive, scan (never by code
that runs inside SGLang).
"""

from __future__ import annotations

import ast
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.safeparse import json_loads

SPEC_FILE = "srt/speculative/adaptive_spec_params.py"


@dataclass
class ReleaseLoader:
    """The adaptive-config loader of one SGLang tree, executed from its source."""

    package_dir: Path
    format: str                       # "tiers" | "flat"
    allows_zero: bool
    _ns: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def source(self) -> str:
        fn = "_load_adaptive_config" if self.format == "tiers" else "load_adaptive_config"
        return f"{self.package_dir / SPEC_FILE} {fn}"

    def load(self, path: str | Path) -> dict[int, list[int]]:
        """Tiers as the release reads them: {batch size: sorted candidate steps}.

        ``flat`` files give one tier, key 1 (they apply to every batch size). Raises the
        release's own ValueError/AssertionError for a file it refuses.
        """
        if self.format == "tiers":
            _, entries = self._ns["_load_adaptive_config"](str(path))
            return {int(k): sorted(set(v["candidate_steps"])) for k, v in entries.items()}
        cfg = self._ns["load_adaptive_config"](str(path))
        steps = cfg.get("candidate_steps", [1, 3, 7])
        # The class's own constructor holds the remaining rule (>= 2 distinct values once the
        # initial step is added); run it with the initial step we would launch with.
        self._ns["AdaptiveSpeculativeParams"](max(steps) if steps else 1, cfg)
        return {1: sorted(set(steps))}

    def defaults(self) -> dict[int, list[int]]:
        """The tiers the release uses without a config file (``DEFAULT_ADAPTIVE_CONFIG``)."""
        if self.format == "tiers":
            _, entries = self._ns["_load_adaptive_config"](None)
            return {int(k): sorted(set(v["candidate_steps"])) for k, v in entries.items()}
        return {1: [1, 3, 7]}  # 0.5.12.post1 AdaptiveSpeculativeParams: cfg.get("candidate_steps", [1, 3, 7])

    def format_mismatch(self, path: str | Path) -> str | None:
        """Why a file in the other release family's format would be misread, or None.

        0.5.12.post1 reads a tiered file without complaint and ignores its tiers (it only looks
        for a top-level ``candidate_steps``), so this is checked here, not left to its loader.
        """
        try:
            data = json_loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # the loader itself reports unreadable files
        if not isinstance(data, dict):
            return None
        tiered = any(str(k).isdigit() for k in data)
        if self.format == "flat" and tiered:
            return ("it has per-batch-size tiers (the 0.5.13+ format); this release reads one "
                    "top-level candidate_steps list and would ignore them")
        return None


def _pick(tree: ast.Module, names: set[str]) -> ast.Module:
    body = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            body.append(node)
        elif (isinstance(node, (ast.Assign, ast.AnnAssign))
              and any(isinstance(t, ast.Name) and t.id in names
                      for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
            body.append(node)
    return ast.Module(body=body, type_ignores=[])


def release_loader(package_dir: str | Path) -> ReleaseLoader:
    """The loader of the tree at ``package_dir`` (the ``sglang/`` folder); UserError when the
    release has no adaptive speculation (before 0.5.12)."""
    pkg = Path(package_dir)
    f = pkg / SPEC_FILE
    if not f.is_file():
        raise UserError(f"this SGLang ({pkg}) has no {SPEC_FILE}: adaptive speculation needs "
                        f"SGLang 0.5.12 or later", exit_code=2)
    tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

    def _noop(*_a: Any, **_k: Any) -> None:
        return None

    ns: dict[str, Any] = {"__name__": "sglang_adaptive_from_source", "json": json,
                          "logger": logging.getLogger("sglang_eagle3_ext.tune.adaptive"),
                          "log_info_on_rank0": _noop, "__builtins__": __builtins__}
    if "_load_adaptive_config" in defined:
        fmt, names = "tiers", {"_load_adaptive_config", "DEFAULT_ADAPTIVE_CONFIG"}
    elif "load_adaptive_config" in defined:
        fmt, names = "flat", {"load_adaptive_config", "AdaptiveSpeculativeParams"}
    else:
        raise UserError(f"{f}: neither _load_adaptive_config nor load_adaptive_config; "
                        f"this release's adaptive config format is unknown to us", exit_code=2)
    code = compile(_pick(tree, names), str(f), "exec")
    exec(code, ns)  # noqa: S102 - the release's own loader, from its source file
    loader = ReleaseLoader(pkg, fmt, allows_zero=False, _ns=ns)
    loader.allows_zero = _accepts_zero(loader)
    return loader


def _accepts_zero(loader: ReleaseLoader) -> bool:
    """Ask the release itself whether 0 (no speculation) is a valid candidate."""
    import tempfile

    if loader.format == "flat":
        return False  # 0.5.12.post1 has no zero-step (no-spec) state at all
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"1": {"candidate_steps": [0, 1]}}, fh)
        probe = fh.name
    try:
        loader.load(probe)
        return True
    except (ValueError, AssertionError):
        return False
    finally:
        Path(probe).unlink(missing_ok=True)


def config_for_tiers(tiers: dict[int, list[int]], fmt: str) -> dict[str, Any]:
    """The JSON object SGLang reads, in the release's format, from {batch size: candidates}."""
    if fmt == "tiers":
        return {str(bs): {"candidate_steps": list(c)} for bs, c in sorted(tiers.items())}
    union = sorted({s for c in tiers.values() for s in c if s > 0})
    if len(union) < 2:
        raise UserError(f"SGLang 0.5.12's adaptive config is one candidate list for every batch "
                        f"size with at least two step counts; the measurements support only "
                        f"{union}: launch with a static --steps instead", exit_code=2)
    return {"candidate_steps": union}


def launch_steps(tiers: dict[int, list[int]]) -> int:
    """--speculative-num-steps to start with: the largest candidate.

    0.5.13+ refuse a start step outside the union of candidates
    (0.5.16 arg_groups/speculative_hook.py _init_adaptive_speculative_params; 0.5.13
    validate_adaptive_initial_steps), and 0.5.16 crashes at start when it is below the largest
    ("shared logits buffer holds 256 rows but caller needs 512", measured on the H200): the
    buffers are sized from the start step while a tier may switch up to the largest.
    """
    union = sorted({s for v in tiers.values() for s in v})
    if not union or max(union) < 1:
        raise UserError("the adaptive config has no positive candidate step: nothing to speculate "
                        "with (launch with --no-spec instead)", exit_code=2)
    return max(union)


def start_below_largest_crashes(version: tuple[int, ...]) -> bool:
    """0.5.16 sizes a shared logits buffer from the start step and asserts at start when a tier
    may switch above it ("shared logits buffer holds 256 rows but caller needs 512", measured on
    the H200); 0.5.23 sizes it over all candidates."""
    return (0, 5, 16) <= version < (0, 5, 17)


def hold_support(env: Any) -> tuple[ReleaseLoader, str | None]:
    """(the release's loader, a note or None) where one server can hold each candidate step count
    in turn; UserError(2) with the reason (and what to use instead) where it cannot.

    The verdict is the step-control runtime's own (stepctl.plan: the controller's methods read
    from the tree's source): holding needs the forward-side ``activate_step_by_batch`` (0.5.13+);
    0.5.12.post1 switches only after a verify, two batches late; older releases have no adaptive
    runtime. Step 0 is asked of the release's own loader (0.5.16+).
    """
    from ..runtime import stepctl

    plan = stepctl.plan(env)
    if not plan["ok"]:
        raise UserError(str(plan["reason"]), exit_code=2)
    loader = release_loader(env.package_dir)
    if loader.format != "tiers":
        raise UserError(f"SGLang {env.version}: its adaptive config has no tiers; one server cannot hold "
                        f"step counts per batch size. Use `sgl-eagle3 sweep`", exit_code=2)
    note = None if loader.allows_zero else (
        f"SGLang {env.version}'s loader refuses step 0 (positive candidate steps only; 0.5.16+ has a "
        f"0-step state)")
    return loader, note


def one_tier(candidates: list[int]) -> dict[str, Any]:
    """The scan's config: ONE tier (key 1, every batch size) listing every candidate, so every
    state captures its CUDA graphs at every captured batch size (a state held at a batch size
    outside its tier runs eager, silently: sglang-adaptive-runtime.md)."""
    return {"1": {"candidate_steps": sorted(set(candidates))}}
