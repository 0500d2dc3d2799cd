"""`launch --trees SPEC` / `scan --trees SPEC`: trees held beside the adaptive chains, checked at start.

Workbench side (the CLI; never inside SGLang). The plugin (runtime/treeswitch.py) does the work in
the server; this module refuses, with one line, every start it cannot serve, before anything
starts, and writes ``SGLANG_EAGLE3_TREES`` into the server's environment:

- the release: the plugin's own hook plan for trees (``hookplan.plan_hooks(..., trees=...)``): each
  target read from this release's source (checked on 0.5.16 and 0.5.23);
- page size 1 only (SGLang's page > 1 tree allocation is another formula);
- attention / decode / prefill / draft backends in {fa3, flashinfer, triton} (the ones with tree
  masks; trtllm_mha has none);
- no rejection sampling, no DP attention, no pipeline parallelism, no multi-layer EAGLE, no
  ``SGLANG_SIMULATE_ACC_LEN`` (each replaces a piece the trees hook);
- adaptive on (trees ride on SGLang's adaptive controller: ``--adaptive`` / ``--policy`` set the
  start at the largest chain, topk 1) and a decider (``--policy``, or the scan's hold schedule):
  SGLang's own rule picks chains only;
- every tree valid (specstate.check) and, where the captured CUDA-graph sizes are known from the
  flags, with a captured size inside its batch range.

``summary`` says what will be held: the trees, their graph batch sizes and the sizing envelope
(everything shared is sized for the largest state).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..runtime import specstate
from ..runtime.errors import UserError
from ..runtime.settings import HOLD, POLICY, TREES
from ..runtime.sglang_env import SGLangEnv
from .extra_args import extra_flags
from .launch_config import LaunchConfig

_RANK = re.compile(r"^\[[^\]]*?\bTP(\d+)\b[^\]]*\]")  # '[... TP1]': another rank's line
TREE_BACKENDS = ("fa3", "flashinfer", "triton")
BACKEND_FLAGS = ("--attention-backend", "--decode-attention-backend", "--prefill-attention-backend",
                 "--speculative-draft-attention-backend")
# flag -> why trees cannot run beside it (one line each)
REFUSED_FLAGS = {
    "--speculative-use-rejection-sampling": "rejection sampling (a verify path the tree switch was not "
                                            "checked against: greedy verify only)",
    "--enable-dp-attention": "DP attention (adaptive decisions are not synchronised across DP ranks)",
    "--enable-multi-layer-eagle": "multi-layer EAGLE (its worker has no adaptive states)",
    "--enable-two-batch-overlap": "two-batch overlap (the state swap drops its attention wrapper)",
    "--enable-pdmux": "PD multiplexing (the state swap does not update its backend group)",
}


def _fail(msg: str) -> UserError:
    return UserError(msg, exit_code=2)


def parse(text: str) -> list[specstate.TreeSpec]:
    """``--trees`` text -> the trees (one line naming what is wrong otherwise)."""
    try:
        specs = specstate.parse_trees(text)
    except ValueError as exc:
        raise _fail(f"--trees {text}: {exc}") from None
    if not specs:
        raise _fail(f"--trees {text!r}: names no tree (e.g. 5x4x21@1-16)")
    return specs


def _int(extra: dict[str, str | bool], name: str) -> int | None:
    v = extra.get(name)
    if v is None or v is True:
        return None
    try:
        return int(str(v))
    except ValueError:
        raise _fail(f"{name} {v!r}: not an integer") from None


def captured_sizes(extra: dict[str, str | bool]) -> tuple[list[int] | None, str]:
    """(the decode CUDA-graph batch sizes the flags pin, how they are known); (None, why) when
    graphs are off or SGLang picks the sizes at start (from GPU memory)."""
    from ..runtime.policy import default_cuda_graph_bs

    if extra.get("--disable-cuda-graph") is True:
        return None, "CUDA graphs off (--disable-cuda-graph): trees run eager at every batch size"
    bs = extra.get("--cuda-graph-bs")
    if isinstance(bs, str):
        try:
            return sorted({int(x) for x in bs.replace(",", " ").split()}), "--cuda-graph-bs"
        except ValueError:
            return None, "--cuda-graph-bs is not a list of integers (SGLang's own check says more)"
    top = _int(extra, "--cuda-graph-max-bs-decode") or _int(extra, "--cuda-graph-max-bs")
    if top:
        return default_cuda_graph_bs(top), f"SGLang's capture list up to batch size {top}"
    return None, "the server's captured sizes (SGLang picks its largest from GPU memory at start)"


def decider(cfg: LaunchConfig) -> str | None:
    """"policy" / "hold" / None: what chooses among the states (trees need one of ours)."""
    env = {**os.environ, **cfg.env}
    if cfg.policy or POLICY.is_set(env):
        return "policy"
    if HOLD.is_set(env):
        return "hold"
    return None


def apply_hold(cfg: LaunchConfig, env: SGLangEnv) -> list[str]:
    """``--hold N``: the plugin's hold schedule decides (every built state in turn, blocks of about
    N cycles, the same on every rank); a note to print. Nothing without it."""
    if cfg.hold is None:
        return []
    if cfg.hold < 1:
        raise _fail(f"--hold {cfg.hold}: cycles per block must be >= 1")
    if cfg.policy:
        raise _fail("--hold with --policy: one decider chooses the state; give one of them")
    if not cfg.adaptive:
        raise _fail("--hold needs --adaptive FILE: the chains it holds are that config's candidates "
                    "(one tier listing them: `sgl-eagle3 adaptive write`, or the scan's sglang-adaptive-scan.json)")
    from .adaptive_format import hold_support

    hold_support(env)  # 0.5.13+ (the forward-side activate_step_by_batch), else one line why
    cfg.env[HOLD.name] = str(cfg.hold)
    return [f"hold: {HOLD.name}={cfg.hold}: every built state in turn (chains largest first, then trees), blocks "
            f"of {cfg.hold // 2 or 1}-{cfg.hold + cfg.hold // 2} decode cycles per batch size; SGLang's own rule "
            "does not switch meanwhile"]


def apply_trees(cfg: LaunchConfig, env: SGLangEnv, extra: dict[str, str | bool]) -> list[str]:
    """Check ``cfg.trees`` (after the adaptive start values are set) and write the environment
    variable; notes to print. Nothing for a config without trees."""
    if cfg.trees is None:
        if TREES.is_set(cfg.env):
            raise _fail(f"{TREES.name} in the preset's env: give the trees with --trees (or `trees:` in the "
                        "preset) so they are checked")
        return []
    specs = parse(cfg.trees)
    problems = release_problems(env)
    if problems:
        raise _fail(f"--trees: {problems[0].removeprefix('trees: ')}")
    if cfg.no_spec:
        raise _fail("--trees with --no-spec: trees are speculative states; drop one of them")
    if not cfg.adaptive:
        raise _fail("--trees needs adaptive speculation (trees are held beside its chains): give --policy "
                    "SCAN_RESULT (the throughput policy chooses chain or tree), or use `sgl-eagle3 scan --trees`")
    who = decider(cfg)
    if who is None:
        raise _fail("--trees needs a decider: SGLang's own rule picks chains only; give --policy SCAN_RESULT "
                    f"(or run `sgl-eagle3 scan --trees`, which holds every state in turn with {HOLD.name})")
    for flag, why in REFUSED_FLAGS.items():
        if extra.get(flag) not in (None, False, "false", "False", "0"):
            raise _fail(f"--trees with {flag}: {why}")
    page = _int(extra, "--page-size")
    if page is not None and page > 1:
        raise _fail(f"--trees with --page-size {page}: trees beside chains need page size 1 (SGLang's paged "
                    "tree allocation is another formula)")
    pp = _int(extra, "--pp-size") or _int(extra, "--pipeline-parallel-size")
    if pp is not None and pp > 1:
        raise _fail(f"--trees with --pp-size {pp}: the pipeline's tail draft relays one tree topology "
                    "(SGLang 0.5.23 eagle_worker_v2.py); use tensor parallelism")
    for flag in BACKEND_FLAGS:
        v = extra.get(flag)
        if isinstance(v, str) and v not in TREE_BACKENDS:
            raise _fail(f"--trees with {flag} {v}: a tree needs a backend with tree masks "
                        f"({', '.join(TREE_BACKENDS)})")
    merged = {**os.environ, **cfg.env}
    for name in ("SGLANG_SIMULATE_ACC_LEN",):
        v = str(merged.get(name, "")).strip()
        if v and v not in ("-1", "-1.0"):
            raise _fail(f"--trees with {name}={v}: simulated acceptance replaces the verify the trees hook")
    if str(merged.get("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", "")).strip() in ("1", "true", "True"):
        raise _fail("--trees with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1: its stub draft extend has the "
                    "launch topk and cannot run beside held trees")
    sizes, how = captured_sizes(extra)
    for t in specs:
        try:
            specstate.graph_sizes(t, sizes)
        except ValueError as exc:
            raise _fail(f"--trees: {exc}; widen its @range or capture more sizes") from None
    cfg.env[TREES.name] = specstate.format_trees(specs)
    return [f"trees: {TREES.name}={cfg.env[TREES.name]} ({who} decides; SGLang {env.version})"]


def release_problems(env: SGLangEnv) -> list[str]:
    """What the plugin's tree hooks cannot find in this release's source (empty: it can)."""
    from ..runtime.plugin import hookplan

    try:
        plan = hookplan.plan_hooks(env, profile=False, aux=False, nccl_preset=False, trees="scheduler")
    except Exception as exc:  # noqa: BLE001 - an unreadable source: the reason, one line
        return [f"SGLang {env.version}: its source could not be read for the tree hooks ({exc})"]
    return list(plan.problems)


def summary(cfg: LaunchConfig, extra_args: list[str] | None = None) -> list[str]:
    """What the dry run prints: every tree with its graph batch sizes, and the sizing envelope
    over the held states (the largest chain, which the server starts at, and the trees)."""
    if cfg.trees is None:
        return []
    specs = parse(cfg.trees)
    extra = extra_flags(list(cfg.extra_args if extra_args is None else extra_args))
    sizes, how = captured_sizes(extra)
    lines = [f"trees held beside the chains ({len(specs)}):"]
    for t in specs:
        g = specstate.graph_sizes(t, sizes)
        rng = "every batch size" if t.hi >= specstate.ANY_BS else f"batch sizes {t.lo}-{t.hi}"
        lines.append(f"  {t.state.describe()}: chosen at padded {rng}; CUDA graphs "
                     + (f"at {g} ({how})" if g is not None else f"at {how}"))
    states = [t.state for t in specs]
    if cfg.steps is not None:
        states.append(specstate.chain(int(cfg.steps)))
    e = specstate.envelope(states)
    lines.append(f"  sized for the largest state (every held state, chains up to {cfg.steps}): max draft "
                 f"tokens {e.max_tokens}, topk carried {e.max_topk}, KV slots per decode per request "
                 f"{e.alloc_per_decode} (draft writes {e.draft_slots})")
    lines.append("  start time and graph memory per extra state: read from the server log after the start "
                 "(SGLang's 'Built adaptive runtime state' and the plugin's 'trees: built' lines)")
    return lines


def log_lines(log_path: Any, limit: int = 64) -> list[str]:
    """The server log's state-building lines (SGLang's 'Built adaptive runtime state ... mem=' and
    the plugin's 'trees: built ...'), rank 0, in order: what each extra state cost to build."""
    from pathlib import Path

    from ..runtime.safeparse import LOG_LIMIT, Unreadable, read_text

    if not log_path or not Path(log_path).is_file():
        return []
    try:
        text = read_text(Path(log_path), what="a server log", limit=LOG_LIMIT, errors="replace")
    except Unreadable:
        return []
    out = []
    for line in text.splitlines():
        r = _RANK.match(line)
        if r and r.group(1) != "0":
            continue
        if "Built adaptive runtime state" in line or "trees: built" in line:
            out.append(line.strip()[-300:])
            if len(out) >= limit:
                break
    return out
