"""`launch --policy SCAN_RESULT`: SGLang's adaptive mode with the throughput policy choosing steps.

Workbench side (runs in the CLI, never inside SGLang). Checks the scan file the policy will read
(the same reader, ``policy.load_table``, so a file that passes here loads there), writes the
adaptive config SGLang needs to build one runtime state per step count the table can choose (ONE
tier listing them: every state then captures every CUDA-graph batch size, 0.5.16
``adaptive_spec_params.py`` ``cuda_graph_bs_for_step``; "can choose" = within ``--policy-within``
% of the table's best at some batch size, the scan's ``--within`` rule, because every extra state
costs start time and memory, and on the H200 six states stalled decode 40-80 ms in a third of the
windows under open-loop churn where two did not, round 9), points ``cfg.adaptive`` at it so the
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
# tune/adaptive.py DEFAULT_WITHIN_PCT (the scan's --within), repeated: serve never imports tune
DEFAULT_WITHIN_PCT = 5


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
    within = _within(cfg)
    doc, cands, dropped, per_bs = _adaptive_config(table, env, within, _max_bs(table, extra))
    out = policy_config_path(scan)
    _write_config(out, doc)
    cfg.adaptive = str(out)
    cfg.env[POLICY.name] = str(scan)
    notes = [f"policy: {scan} ({len(table.cells)} cells; candidates {table.candidates}); adaptive config "
             f"{out} with one tier listing {cands}; {POLICY.name} set (the plugin installs the decider)"]
    if dropped:
        notes.append(f"policy: step 0 left out: SGLang {env.version}'s adaptive loader wants positive steps")
    notes += _state_notes(table, cands, per_bs, within)
    notes += _tree_notes(table, cfg, cands)
    notes += _mismatch_notes(scan, cfg, env)
    notes += _reach_notes(scan, table.candidates)
    return notes


def _tree_notes(table: policy.ScanTable, cfg: LaunchConfig, chains: list[int]) -> list[str]:
    """Trees: every tree the launch holds must have the scan's costs (the policy refuses to start
    otherwise); a scan that measured trees the launch does not hold says how to hold them."""
    measured = sorted(table.trees.points) if table.trees is not None else []
    if cfg.trees is None:
        if not measured:
            return []
        return [f"policy: the scan measured tree(s) {', '.join(measured)} beside the chains; this launch holds "
                f"chains only (--trees {','.join(measured)} holds them too, the policy then chooses chain or tree "
                "per batch size)"]
    from ..runtime import specstate

    try:
        held = [t.state.label for t in specstate.parse_trees(cfg.trees)]
    except ValueError:
        return []  # trees_launch.apply_trees says what is wrong with the text
    missing = [t for t in held if t not in measured]
    if missing:
        raise _fail(f"--trees {', '.join(missing)}: the scan {cfg.policy} has no cell for "
                    + ("it" if len(missing) == 1 else "them")
                    + (f" (it measured trees {', '.join(measured)})" if measured else " (it measured chains only)")
                    + f": the policy needs each tree's cost and acceptance; scan --trees {cfg.trees} first")
    return [f"policy: chooses among chains {chains} and trees {held} per batch size; each tree's "
            "acceptance is counted online from its own cycles (explored 1 cycle in 32 per batch size until it has "
            "256 verified requests, then 1 in 256; the share is in the probe records' control.policy)"]


def _within(cfg: LaunchConfig) -> int:
    w = DEFAULT_WITHIN_PCT if cfg.policy_within is None else cfg.policy_within
    if not 0 <= w <= 100:
        raise _fail(f"--policy-within {w}: a percentage in [0, 100] (100 = a state for every candidate)")
    return w


def _max_bs(table: policy.ScanTable, extra: dict[str, str | bool]) -> int:
    """The batch sizes the states must cover: up to the server's --max-running-requests (it never
    batches more; the table extrapolates past its last cell), else the table's largest one."""
    mrr = extra.get("--max-running-requests")
    try:
        top = int(str(mrr)) if isinstance(mrr, str) else 0
    except ValueError:
        top = 0  # SGLang's own check says what is wrong with it
    if top <= 0:
        top = max((bs for pts in table.points.values() for bs, _ in pts), default=1)
    return min(max(1, top), 4096)


def reachable(table: policy.ScanTable, within_pct: float, max_bs: int,
              allows_zero: bool = True) -> dict[int, list[int]]:
    """{batch size: the step counts whose table tok/s is within ``within_pct`` % of that batch
    size's best} for 1..max_bs: the table's accept length over its cycle ms (``table_rate``, the
    policy's prior; its online acceptance may move the choice among these), step 0 only where the
    table says it beats 1 step (the decider's own rule)."""
    out: dict[int, list[int]] = {}
    for bs in range(1, max_bs + 1):
        rates = {s: table.table_rate(s, bs) for s in table.candidates if s > 0 or allows_zero}
        if 0 in rates and not table.zero_allowed(bs):
            del rates[0]
        rates = {s: r for s, r in rates.items() if r is not None and r > 0}
        if rates:
            floor = max(rates.values()) * (1 - within_pct / 100.0)
            out[bs] = sorted(s for s, r in rates.items() if r >= floor)
    return out


def _spans(per_bs: dict[int, list[int]], steps: int) -> str:
    """Batch sizes where ``steps`` is within reach, as ranges: "1-8, 24-32"."""
    have = [bs for bs, ss in per_bs.items() if steps in ss]
    runs: list[list[int]] = []
    for bs in have:
        if runs and bs == runs[-1][1] + 1:
            runs[-1][1] = bs
        else:
            runs.append([bs, bs])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _state_notes(table: policy.ScanTable, cands: list[int], per_bs: dict[int, list[int]],
                 within: int) -> list[str]:
    if within >= 100 or not per_bs:
        return []
    left = [s for s in table.candidates if s not in cands]
    top = max(per_bs)
    where = "; ".join(f"{s} at batch {_spans(per_bs, s)}" for s in cands)
    notes = [f"policy: states for {cands} only: the step counts within {within} % of the table's best "
             f"tok/s at some batch size 1..{top} ({where})"
             + (f"; {left} never are, so they get no state (each state captures its own CUDA graphs); "
                f"--policy-within 100 builds them all" if left else "")]
    if len(cands) == 1:
        notes.append(f"policy: one state: the policy runs {cands[0]} steps at every batch size, as "
                     f"`--steps {cands[0]}` would; a larger --policy-within gives it a choice")
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


def _adaptive_config(table: policy.ScanTable, env: SGLangEnv, within: int, max_bs: int
                     ) -> tuple[dict, list[int], bool, dict[int, list[int]]]:
    """(config document, states, step 0 dropped, reach per batch size) in the release's format:
    one tier, key 1, listing the step counts the table can choose. The one place this module uses
    the adaptive-format helpers (the release's own loader decides the format and whether 0 is
    allowed)."""
    from . import adaptive_format

    loader = adaptive_format.release_loader(env.package_dir)
    cands = table.candidates
    dropped = 0 in cands and not loader.allows_zero
    if dropped:
        cands = [s for s in cands if s > 0]
    per_bs: dict[int, list[int]] = {}
    if within < 100:
        per_bs = reachable(table, within, max_bs, allows_zero=loader.allows_zero)
        keep = {s for ss in per_bs.values() for s in ss}
        cands = [s for s in cands if s in keep] or cands
    return adaptive_format.config_for_tiers({1: cands}, loader.format), cands, dropped, per_bs


def _write_config(out: Path, doc: dict) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--policy: cannot write the adaptive config {out} ({exc.strerror or exc})", 1) from None
