"""`launch --policy SCAN_RESULT`: SGLang's adaptive mode with the throughput policy choosing steps.

Workbench side (runs in the CLI, never inside SGLang). Checks the scan file the policy will read
(the same reader, ``policy.load_table``, so a file that passes here loads there), writes the
adaptive config SGLang needs to build one runtime state per candidate (ONE tier listing every
candidate step of the table: every state then captures every CUDA-graph batch size, 0.5.16
``adaptive_spec_params.py`` ``cuda_graph_bs_for_step``), points ``cfg.adaptive`` at it so the
``--adaptive`` rules (the release's own loader, the start step = the largest candidate) apply
unchanged, and sets ``SGLANG_EAGLE3_POLICY`` for the plugin.

Per release (the policy needs the step-control hooks on the controller's forward-side call):
- 0.5.16+: every candidate, step 0 included where the table has it (the policy still uses 0 only
  where the table says it beats 1);
- 0.5.13: the same without step 0 (its loader wants positive steps);
- 0.5.12.post1: refused (no ``activate_step_by_batch``: its only call is on the verify side and a
  switch lands two batches late, so a per-batch choice cannot be honoured);
- older: refused (no adaptive speculation).
On 0.5.23, SGLang's own policy interface (``adaptive_runtime_state.AdaptiveSpecPolicy``) is not
used: eagle_worker_v2.py builds ``AdaptiveSpeculativeParams`` inline (no factory or option to pass
another), and its ``on_verify_complete`` gets no step count, which the policy needs to credit
accept counts to the cycle that made them under the overlap scheduler; the step-control hooks
give both, on every release from 0.5.13.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..runtime import policy
from ..runtime.errors import UserError
from ..runtime.safeparse import load_json_file, read_bytes
from ..runtime.settings import HOLD, POLICY
from ..runtime.sglang_env import SGLangEnv, parse_version
from .launch_config import LaunchConfig

MIN_RELEASE = "0.5.13"


def _fail(msg: str) -> UserError:
    return UserError(msg, exit_code=2)


def release_reason(version: str) -> str | None:
    """Why ``--policy`` cannot run on this release, or None."""
    v = parse_version(version)
    if v >= parse_version(MIN_RELEASE):
        return None
    if v >= parse_version("0.5.12"):
        return (f"SGLang {version} has no forward-side adaptive call (activate_step_by_batch, "
                f"0.5.13+): its controller switches from the verify side and the change lands two "
                f"batches late, so a choice per batch cannot be honoured; use 0.5.13 or later")
    return (f"SGLang {version} has no adaptive speculation (0.5.12+; the policy needs 0.5.13+); "
            f"launch the scan's best step count with --steps")


def policy_config_path(scan: Path) -> Path:
    """Where the adaptive config for this scan goes (one per scan file and content)."""
    from ..runtime.resources import cache_root

    digest = hashlib.sha1(str(scan).encode() + b"\0" + read_bytes(scan, what="a scan result")).hexdigest()[:12]
    return cache_root() / "policy" / f"adaptive-{scan.stem}-{digest}.json"


def apply_policy(cfg: LaunchConfig, env: SGLangEnv, extra: dict[str, str | bool]) -> list[str]:
    """Check ``--policy FILE``, write its adaptive config and set the env; notes to print.

    Runs before ``flags.apply_adaptive`` (which then checks the written config with the release's
    own loader and sets the start step). Idempotent: a second ``validate`` of the same config
    finds its own written config and returns at once.
    """
    if not cfg.policy:
        return []
    try:
        scan = policy.scan_file(cfg.policy).absolute()  # a scan folder names its scan.json
    except ValueError as exc:
        raise _fail(f"--policy {exc}") from None
    if cfg.env.get(POLICY.name) == str(scan) and cfg.adaptive:
        return []
    if cfg.adaptive:
        raise _fail("--policy with --adaptive: the policy writes its own adaptive config from the scan "
                    "(one tier of the scan's candidates); give one of them")
    if cfg.no_spec:
        raise _fail("--policy with --no-spec: the policy chooses speculative step counts; drop one of them")
    if "--speculative-adaptive" in extra:
        raise _fail("--speculative-adaptive in the extra SGLang args with --policy: give --policy alone")
    if HOLD.is_set() or HOLD.is_set(cfg.env):
        raise _fail(f"--policy with {HOLD.name} set: one decider holds the step count (the hold schedule "
                    f"is the scan's); unset {HOLD.name}")
    why = release_reason(env.version)
    if why:
        raise _fail(f"--policy: {why}")
    if cfg.topk is not None and cfg.topk != 1:
        raise _fail(f"--policy with --topk {cfg.topk}: SGLang's adaptive speculation, which the policy "
                    f"drives, supports topk 1 only")
    try:  # the reader SGLang's processes use (bounded, regular files only): what passes here loads there
        table = policy.load_table(scan)
    except ValueError as exc:
        hint = " (give the scan.json `sgl-eagle3 scan` writes, or its folder)" if "no such file" in str(exc) else ""
        raise _fail(f"--policy {exc}{hint}") from None
    doc, cands, dropped = _adaptive_config(table, env)
    out = policy_config_path(scan)
    _write_config(out, doc)
    cfg.adaptive = str(out)
    cfg.env[POLICY.name] = str(scan)
    notes = [f"policy: {scan} ({len(table.cells)} cells; candidates {table.candidates}); adaptive config "
             f"{out} with one tier listing {cands}; {POLICY.name} set (the plugin installs the decider)"]
    if dropped:
        notes.append(f"policy: step 0 left out: SGLang {env.version}'s adaptive loader wants positive steps")
    notes += _mismatch_notes(scan, cfg, env)
    notes += _reach_notes(scan, cands)
    return notes


def _reach_notes(scan: Path, cands: list[int]) -> list[str]:
    """The policy never runs a step count the scan did not measure: where a batch size's fastest
    measured step count is the largest candidate, a larger one may be faster still. Read per batch
    size from the scan's own cells (scan_doc.table: the per-stream tok/s the scan printed), so the
    note says what the table says (issue 33: it once said "every batch size" where batch 1's best
    was 4 of 5)."""
    from ..documents import scan_doc

    try:
        table = scan_doc.table(scan_doc.load(scan))
    except UserError:
        return []
    top = max(cands)
    best = {bs: max(row, key=lambda s: (row[s], -s)) for bs, row in sorted(table.items()) if row}
    edge = [bs for bs, s in best.items() if s == top]
    if not edge:
        return []
    per_bs = ", ".join(f"{s} at batch {bs}" for bs, s in best.items())
    return [f"policy: the scan's fastest step count per batch size: {per_bs}; at batch size "
            f"{', '.join(map(str, edge))} that is its largest candidate ({top}), and the policy only "
            f"chooses among measured step counts, so a larger one may be faster still there: scan "
            f"--steps 0-{top + 2} to let it choose them (SGLang's default tiers go up to 7)"]


def _mismatch_notes(scan: Path, cfg: LaunchConfig, env: SGLangEnv) -> list[str]:
    """The scan's costs are this server's only if it measured the same release, target and draft."""
    try:
        doc = load_json_file(scan, what="a scan result")  # read and checked by load_table just before
    except ValueError:
        return []
    notes = []
    v = doc.get("sglang_version")
    if isinstance(v, str) and v != env.version:
        notes.append(f"policy: the scan measured SGLang {v}, this launch runs {env.version}: its cycle costs "
                     f"may not hold here (scan again on this release)")
    for key, mine in (("model", cfg.model), ("draft", cfg.draft)):
        theirs = doc.get(key)
        if isinstance(theirs, str) and mine and Path(theirs).expanduser().name != Path(str(mine)).expanduser().name:
            notes.append(f"policy: the scan's {key} was {theirs}, this launch's is {mine}: its costs and "
                         f"acceptance may not hold")
    return notes


def _adaptive_config(table: policy.ScanTable, env: SGLangEnv) -> tuple[dict, list[int], bool]:
    """(config document, candidates, step 0 dropped) in the release's format: one tier, key 1,
    listing the table's candidates. The one place this module uses the adaptive-format helpers
    (the release's own loader decides the format and whether 0 is allowed)."""
    from . import adaptive_format

    loader = adaptive_format.release_loader(env.package_dir)
    cands = table.candidates
    dropped = 0 in cands and not loader.allows_zero
    if dropped:
        cands = [s for s in cands if s > 0]
    return adaptive_format.config_for_tiers({1: cands}, loader.format), cands, dropped


def _write_config(out: Path, doc: dict) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--policy: cannot write the adaptive config {out} ({exc.strerror or exc})", 1) from None
