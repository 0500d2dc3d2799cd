"""Speculative-flag rules per SGLang release, checked before any server process starts.

SGLang accepts nonsense silently (steps 0, topk 0, 64 draft tokens for a 2-step topk-4 tree, EAGLE
with an EAGLE-3 draft, EAGLE3 without a draft) and fixes some values behind the user's back
(draft tokens := steps + 1 when topk == 1). A model load can take 15 minutes, so every rule here
runs first, statically, against the *source* of the release in use (no import), and then, when
that same release is importable, SGLang's own resolution and checks run in a child process.

Each mirrored SGLang rule cites release + file:line (paths relative to ``sglang/srt/``).

Also here: ``build_command``, the exact SGLang argv + env a ``LaunchConfig`` becomes (what the rules
check and ``server.Server`` runs). This module reads ``launch_config`` and never imports ``server``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..runtime import settings
from ..runtime.bounds import MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK
from ..runtime.errors import UserError
from ..runtime.safeparse import MIB, Unreadable, json_loads, read_text
from ..runtime.settings import (
    AUX_LAYERS,
    NCCL,
    PROFILE,
    PROFILE_EVERY,
    PROFILE_MODE,
    PROFILE_OUT,
    PROFILE_SPEC,
)
from ..runtime.sglang_env import SGLangEnv, parse_version
from .extra_args import extra_flags
from .launch_config import LaunchConfig, check_env_names
from .release_flags import _FLAG_RE, eagle3_archs, known_flags, read_architecture
from .sglang_check import importable_matches, run_sglang_checks

ALGORITHMS = ("EAGLE", "EAGLE3")
# NEXTN is SGLang's alias of EAGLE in every release (0.5.23 arg_groups/speculative_hook.py:107-113).
ALGORITHM_ALIASES = {"NEXTN": "EAGLE"}
# --profile-mode: the probe timing modes but auto (leaving the flag out is auto); settings.py names them
PROFILE_MODES = tuple(m for m in settings.PROFILE_MODES if m != "auto")

# Spec flags the wrapper owns: given through `-- extra args` they would bypass every rule here.
OWNED_FLAGS = {
    "--speculative-algorithm": "--algorithm",
    "--speculative-draft-model-path": "--draft",
    "--speculative-draft-model": "--draft",
    "--speculative-num-steps": "--steps",
    "--speculative-eagle-topk": "--topk",
    "--speculative-num-draft-tokens": "--draft-tokens",
    "--speculative-adaptive-config": "--adaptive",
    "--model-path": "--model",
    "--model": "--model",
    "--tp-size": "--tp",
    "--tp": "--tp",
    "--tensor-parallel-size": "--tp",
    "--host": "--host",
    "--port": "--port",
    "--nnodes": "--nnodes",
    "--node-rank": "--nnodes (ranks are printed per node)",
    "--dist-init-addr": "--dist-init-addr",
}

# Targets whose checkpoint carries its own MTP/NextN draft layer: SGLang sets the draft path to the
# model path for them, so plain EAGLE needs no --draft (0.5.23 arg_groups/speculative_hook.py:1121-1151;
# 0.5.9 server_args.py _handle_speculative_decoding has the DeepSeek/GLM/Bailing subset).
MTP_TARGET_ARCHS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM",
    "DeepseekV2ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})


# Extra SGLang args: the few values the rules need to see (extra_args.extra_flags, shared with
# trees_launch, which flags imports)


def _int_value(flags: dict[str, str | bool], name: str) -> int | None:
    v = flags.get(name)
    if v is None or v is True:
        return None
    try:
        return int(str(v))
    except ValueError as exc:
        raise UserError(f"{name} {v!r}: not an integer", 2) from exc


# --------------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------------

def _fail(msg: str) -> UserError:
    return UserError(msg, exit_code=2)


def normalise_algorithm(name: str | None) -> str:
    algo = (name or "EAGLE3").upper()
    algo = ALGORITHM_ALIASES.get(algo, algo)
    if algo not in ALGORITHMS:
        raise _fail(f"--algorithm {name}: this wrapper launches EAGLE or EAGLE3 (NEXTN = EAGLE)")
    return algo


def _check_basic(cfg: LaunchConfig) -> None:
    if cfg.tp is not None and cfg.tp < 1:
        raise _fail(f"--tp {cfg.tp}: must be >= 1")
    if not 1 <= int(cfg.port) <= 65535:
        raise _fail(f"--port {cfg.port}: must be 1-65535")
    if cfg.timeout is not None and not 0 < cfg.timeout < float("inf"):  # NaN fails both sides
        raise _fail(f"--timeout {cfg.timeout}: must be a finite number of seconds > 0")
    check_env_names(cfg.env, "env")
    if cfg.nnodes < 1:
        raise _fail(f"--nnodes {cfg.nnodes}: must be >= 1")
    if cfg.nnodes > 1 and not cfg.dist_init_addr:
        raise _fail("--nnodes > 1 needs --dist-init-addr HOST:PORT (node 0's address, same on every node)")
    if cfg.profile_mode is not None and cfg.profile_mode not in PROFILE_MODES:
        raise _fail(f"--profile-mode {cfg.profile_mode}: choose one of {', '.join(PROFILE_MODES)}")
    if cfg.profile_every is not None and cfg.profile_every < 1:
        raise _fail(f"--profile-every {cfg.profile_every}: must be >= 1 (cycles per window)")
    if not cfg.profile and (cfg.profile_every or cfg.profile_mode or cfg.profile_out):
        raise _fail("--profile-every/--profile-mode/--profile-out need --profile")
    if cfg.aux_layers is not None:
        from ..runtime.layers import (
            parse_layers,  # the one aux-layer parser; UserError(2) with the reason
        )

        parse_layers(str(cfg.aux_layers))
    if not cfg.model:
        raise _fail("no target model: give --model PATH (or a preset that sets model:)")


def _check_spec_values(cfg: LaunchConfig, extra: dict[str, str | bool]) -> None:
    given = {"--steps": cfg.steps, "--topk": cfg.topk, "--draft-tokens": cfg.draft_tokens}
    if cfg.no_spec:
        extra_spec = [k for k in ("--draft",) if cfg.draft] + [k for k, v in given.items() if v is not None]
        if extra_spec:
            raise _fail(f"--no-spec conflicts with {', '.join(extra_spec)} (drop them, or drop --no-spec)")
        return
    present = [k for k, v in given.items() if v is not None]
    if not present:
        if "--speculative-adaptive" in extra:
            return  # adaptive picks steps/topk itself (0.5.23 arg_groups/speculative_hook.py step 8)
        raise _fail("give --steps, --topk and --draft-tokens together (or --no-spec); SGLang's "
                    "automatic choice depends on the target architecture and the release")
    if len(present) != 3:
        missing = [k for k, v in given.items() if v is None]
        # SGLang: only topk/ndt -> bare AssertionError; only steps -> TypeError on None > int
        # (0.5.23 arg_groups/speculative_hook.py:1156-1160 and :1274).
        raise _fail(f"{', '.join(present)} given without {', '.join(missing)}: the three speculative "
                    f"values go together (SGLang fails with a bare AssertionError/TypeError otherwise)")
    steps, topk, ndt = cfg.steps, cfg.topk, cfg.draft_tokens
    assert steps is not None and topk is not None and ndt is not None
    # SGLang accepts 0 / negatives for all three (no check in any release, reference 2a).
    if steps < 1:
        raise _fail(f"--steps {steps}: must be >= 1 (SGLang treats 0 as 'drafting disabled')")
    if topk < 1:
        raise _fail(f"--topk {topk}: must be >= 1")
    if ndt < 1:
        raise _fail(f"--draft-tokens {ndt}: must be >= 1")
    # no upper bound in SGLang: --steps 1000000 would start and size buffers for it (runtime/bounds.py)
    for flag, v, top in (("--steps", steps, MAX_STEPS), ("--topk", topk, MAX_TOPK), ("--draft-tokens", ndt, MAX_DRAFT_TOKENS)):
        if v > top:
            raise _fail(f"{flag} {v}: at most {top} (runtime/bounds.py: far above any EAGLE-3 draft; SGLang's "
                        "default adaptive tiers stop at 7 steps)")
    if topk == 1 and ndt != steps + 1:
        # SGLang rewrites ndt := steps + 1 with only a warning, every release
        # (0.4.10.post2 server_args.py:576; 0.5.9 server_args.py:2448; 0.5.23 speculative_hook.py:1256-1266).
        raise _fail(f"--topk 1 (a chain) verifies steps + 1 tokens: use --draft-tokens {steps + 1} with "
                    f"--steps {steps} (SGLang would silently replace {ndt} by {steps + 1})")
    if ndt > steps * topk + 1:
        # No upper bound in SGLang (the check is commented out in 0.4.x; version map section 6 rule 4).
        raise _fail(f"--draft-tokens {ndt}: a tree of {steps} steps x topk {topk} has at most "
                    f"{steps * topk + 1} tokens (steps * topk + 1)")


# Server settings under which SGLang turns adaptive speculation off with only a warning
# (0.5.12.post1 .. 0.5.23 speculative/adaptive_spec_params.py adaptive_unsupported_reason, called from
# 0.5.12.post1 server_args.py:3908-3919 and 0.5.13+ arg_groups/speculative_hook.py _maybe_disable_adaptive).
ADAPTIVE_BLOCKERS = {
    "--enable-dp-attention": "attention DP (adaptive tier decisions are not synchronised across DP ranks)",
    "--enable-multi-layer-eagle": "multi-layer EAGLE (its worker does not implement adaptive)",
    "--enable-two-batch-overlap": "two-batch overlap (the adaptive state swap would drop its attention wrapper)",
    "--enable-pdmux": "PD multiplexing (the adaptive state swap does not update its backend group)",
}


def apply_adaptive(cfg: LaunchConfig, env: SGLangEnv, extra: dict[str, str | bool]) -> list[str]:
    """Check ``--adaptive FILE`` against SGLang's own rules and set the start values it needs.

    Refuses (exit 2) where SGLang would silently fall back to static speculation, or not start.
    Sets ``cfg.steps`` / ``topk`` / ``draft_tokens`` in place when not given: the largest candidate
    of the file (adaptive_format.launch_steps says why), topk 1, steps + 1. Returns notes saying so.
    """
    from . import adaptive_format as adaptive

    if not cfg.adaptive:
        return _bare_adaptive_0516(cfg, env, extra)
    if cfg.no_spec:
        raise _fail("--adaptive with --no-spec: adaptive changes the speculative steps; drop one of them")
    if "--speculative-adaptive" in extra:
        raise _fail("--speculative-adaptive in the extra SGLang args with --adaptive FILE: give --adaptive alone")
    if env.version_tuple < parse_version("0.5.12"):
        # --speculative-adaptive first appears in 0.5.12(.post1) server_args.py (dataclass field + argparse).
        raise _fail(f"--adaptive needs SGLang 0.5.12 or later (SGLang {env.version} has no --speculative-adaptive)")
    if cfg.topk is not None and cfg.topk != 1:
        raise _fail(f"--adaptive with --topk {cfg.topk}: SGLang's adaptive speculation supports topk 1 only "
                    f"and would fall back to static speculation (speculative/adaptive_spec_params.py "
                    f"adaptive_unsupported_reason)")
    for flag, why in ADAPTIVE_BLOCKERS.items():
        if extra.get(flag) not in (None, False, "false", "False", "0"):
            raise _fail(f"--adaptive with {flag}: SGLang {env.version} does not support adaptive speculation "
                        f"with {why} and would fall back to static speculation "
                        f"(speculative/adaptive_spec_params.py adaptive_unsupported_reason)")
    path = Path(cfg.adaptive).expanduser()
    try:  # bounded and regular-file-only before SGLang's loader (which reads whatever it is given)
        json_loads(read_text(path, what="an adaptive config", limit=MIB))
    except Unreadable as exc:
        hint = " (write one with `sgl-eagle3 adaptive write`)" if "no such file" in str(exc) else ""
        raise _fail(f"--adaptive {exc}{hint}") from None
    except ValueError as exc:
        raise _fail(f"--adaptive {cfg.adaptive}: not JSON ({exc})") from None
    loader = adaptive.release_loader(env.package_dir)
    mismatch = loader.format_mismatch(path)
    if mismatch:
        raise _fail(f"--adaptive {cfg.adaptive}: {mismatch} (SGLang {env.version}); write it with "
                    f"`sgl-eagle3 adaptive write` against this release")
    try:
        tiers = loader.load(path)
    except (ValueError, AssertionError, KeyError, TypeError, AttributeError) as exc:
        raise _fail(f"--adaptive {cfg.adaptive}: SGLang {env.version}'s own loader refuses it "
                    f"({loader.source}): {exc}") from exc
    union = sorted({s for v in tiers.values() for s in v})
    if union and max(union) > MAX_STEPS:  # it would reach SGLang as --speculative-num-steps
        raise _fail(f"--adaptive {cfg.adaptive}: candidate step {max(union)} is above {MAX_STEPS} (one runtime "
                    "state with its own CUDA graphs per candidate; SGLang's default tiers stop at 7)")
    target = adaptive.launch_steps(tiers)
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(tiers.items()))
    notes = [f"adaptive config {path} as SGLang {env.version} reads it ({loader.format}): {{{shown}}}"]
    if cfg.steps is not None:
        if loader.format == "tiers" and cfg.steps not in union:
            # 0.5.13 speculative/adaptive_spec_params.py validate_adaptive_initial_steps;
            # 0.5.16+ arg_groups/speculative_hook.py _init_adaptive_speculative_params.
            raise _fail(f"--steps {cfg.steps} is not a candidate of {cfg.adaptive} ({union}); SGLang "
                        f"{env.version} refuses that at start. Leave --steps out (the wrapper uses {target})")
        if cfg.steps != target and adaptive.start_below_largest_crashes(env.version_tuple):
            raise _fail(f"--steps {cfg.steps} below the largest candidate {target} of {cfg.adaptive}: SGLang "
                        f"{env.version} crashes at start ('shared logits buffer holds 256 rows but caller "
                        f"needs 512', measured on H200). Leave --steps out (the wrapper uses {target})")
        if cfg.topk is None:
            cfg.topk = 1
        if cfg.draft_tokens is None:
            cfg.draft_tokens = cfg.steps + 1
        notes.append(f"adaptive: starting at your --steps {cfg.steps} (candidates {union})")
        return notes
    cfg.steps, cfg.topk, cfg.draft_tokens = target, 1, target + 1
    notes.append(f"adaptive: set --steps {target} --topk 1 --draft-tokens {target + 1}: the largest candidate "
                 f"step of the config (SGLang sizes its buffers from the start step; 0.5.16 crashes at start "
                 f"below the largest, and 0.5.13+ refuse a start step outside the candidates); topk 1 is the "
                 f"only one adaptive supports; draft tokens = steps + 1 at topk 1")
    return notes


def _bare_adaptive_0516(cfg: LaunchConfig, env: SGLangEnv, extra: dict[str, str | bool]) -> list[str]:
    """``-- --speculative-adaptive`` (the release's default tiers) on 0.5.16: start at the largest
    default candidate, because anything below crashes at start there, including SGLang's own pick,
    the middle candidate (0.5.16 arg_groups/speculative_hook.py _init_adaptive_speculative_params)."""
    from . import adaptive_format as adaptive

    if cfg.no_spec or "--speculative-adaptive" not in extra or not adaptive.start_below_largest_crashes(env.version_tuple):
        return []
    tiers = adaptive.release_loader(env.package_dir).defaults()
    target = adaptive.launch_steps(tiers)
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(tiers.items()))
    if cfg.steps is not None and cfg.steps != target:
        raise _fail(f"--speculative-adaptive with --steps {cfg.steps} on SGLang {env.version}: its default tiers "
                    f"({{{shown}}}) reach {target} steps, and a start below the largest candidate crashes at start "
                    f"('shared logits buffer holds 256 rows but caller needs 512'); use --steps {target}, or "
                    f"--adaptive FILE with the tiers you want")
    if cfg.steps is None and cfg.topk is None and cfg.draft_tokens is None:
        cfg.steps, cfg.topk, cfg.draft_tokens = target, 1, target + 1
        return [f"--speculative-adaptive with SGLang {env.version}'s default tiers {{{shown}}}: set --steps {target} "
                f"--topk 1 --draft-tokens {target + 1} (SGLang would start at the middle candidate, and 0.5.16 "
                f"crashes at start below the largest)"]
    return []


def _check_models(cfg: LaunchConfig, env: SGLangEnv, algo: str | None) -> list[str]:
    notes: list[str] = []
    target_arch = read_architecture(cfg.model, "--model")
    if algo is None:
        return notes
    if not cfg.draft:
        if algo == "EAGLE3":
            # SGLang resolves EAGLE3 without a draft and fails only at worker init (reference 2a).
            raise _fail("EAGLE3 needs an EAGLE-3 draft model: give --draft PATH")
        if target_arch not in MTP_TARGET_ARCHS:
            raise _fail(f"EAGLE without --draft only works for targets with built-in MTP layers "
                        f"(DeepSeek V3, GLM-4 MoE, ...); {target_arch} needs --draft PATH")
        notes.append(f"EAGLE (MTP): SGLang uses the target {cfg.model} as its own draft")
        return notes
    draft_arch = read_architecture(cfg.draft, "--draft")
    known = eagle3_archs(env)
    is_eagle3 = "Eagle3" in draft_arch
    if algo == "EAGLE3" and not is_eagle3:
        raise _fail(f"--algorithm EAGLE3 needs an EAGLE-3 draft, but {cfg.draft} is {draft_arch} "
                    f"(EAGLE-3 drafts in SGLang {env.version}: {', '.join(sorted(known)) or 'none'}); "
                    f"use --algorithm EAGLE for an EAGLE-1/2 or MTP draft")
    if algo == "EAGLE" and is_eagle3:
        # With EAGLE the target never captures aux hidden states, so an EAGLE-3 draft gets wrong inputs.
        raise _fail(f"--draft {cfg.draft} is an EAGLE-3 draft ({draft_arch}): use --algorithm EAGLE3")
    if is_eagle3 and draft_arch not in known:
        raise _fail(f"draft architecture {draft_arch} is not in SGLang {env.version} "
                    f"(it has: {', '.join(sorted(known)) or 'none'})")
    return notes


def _check_release_rules(cfg: LaunchConfig, env: SGLangEnv, extra: dict[str, str | bool],
                         child_env: dict[str, str]) -> list[str]:
    """topk / page-size / attention-backend / spec V2 rules of this release (version map 6 rule 3)."""
    notes: list[str] = []
    topk = cfg.topk or 1
    page = _int_value(extra, "--page-size")
    backend = extra.get("--attention-backend")
    backends = {str(extra[k]) for k in ("--attention-backend", "--decode-attention-backend",
                                         "--prefill-attention-backend") if isinstance(extra.get(k), str)}
    v = env.version_tuple
    if topk > 1 and page is not None and page > 1:
        if v < parse_version("0.4.7"):
            raise _fail(f"SGLang {env.version} forces --topk 1 when --page-size > 1 (0.4.6 "
                        f"server_args.py:320-359): use --page-size 1 or --topk 1")
        if v >= parse_version("0.5.2"):
            if v >= parse_version("0.5.13"):   # 0.5.23 arg_groups/speculative_hook.py:1271-1283
                ok = ("flashinfer", "fa3", "triton")
            elif v >= parse_version("0.5.6"):  # 0.5.9 server_args.py:2452-2459
                ok = ("flashinfer", "fa3")
            else:                              # 0.5.3.post2 server_args.py:1243-1250
                ok = ("flashinfer",)
            if backend not in ok:
                got = f"--attention-backend {backend}" if isinstance(backend, str) else "no --attention-backend"
                raise _fail(f"--topk {topk} with --page-size {page} needs --attention-backend "
                            f"{' or '.join(ok)} in SGLang {env.version} (got {got}); or use --page-size 1")
    if topk > 1 and "trtllm_mha" in backends and v >= parse_version("0.5.1"):
        # 0.5.3.post2 server_args.py:1231; 0.5.23 arg_groups/speculative_hook.py:1176-1180.
        raise _fail(f"--topk {topk}: the trtllm_mha attention backend only supports --topk 1")
    if topk != 1 and "--speculative-use-rejection-sampling" in extra:
        # 0.5.23 arg_groups/speculative_hook.py:1220-1223 (flag exists from 0.5.16).
        raise _fail("--speculative-use-rejection-sampling requires --topk 1")
    spec_v2 = child_env.get("SGLANG_ENABLE_SPEC_V2")
    v2_on = spec_v2 is not None and spec_v2.lower() in ("1", "true", "yes")
    if parse_version("0.5.7") <= v < parse_version("0.5.11") and v2_on and topk > 1:
        # 0.5.9 server_args.py:2368-2382: ValueError "Spec v2 currently only supports topk = 1".
        raise _fail(f"SGLANG_ENABLE_SPEC_V2=1 with --topk {topk}: spec V2 of SGLang {env.version} "
                    f"supports only --topk 1 (unset SGLANG_ENABLE_SPEC_V2 to run V1)")
    if parse_version("0.5.11") <= v < parse_version("0.5.13") and topk > 1:
        # 0.5.12.post1 server_args.py:3749-3766: silent fallback to the V1 worker.
        notes.append(f"--topk {topk} on SGLang {env.version}: SGLang falls back to the spec V1 worker "
                     f"(V2 supports only topk 1 before 0.5.13)")
    if v >= parse_version("0.5.14") and spec_v2 is not None:
        # 0.5.16 arg_groups/speculative_hook.py:85-90: the variable only logs a removal warning.
        notes.append(f"SGLANG_ENABLE_SPEC_V2 has no effect in SGLang {env.version} (removed in 0.5.14)")
    return notes


def _check_flags_exist(argv: list[str], env: SGLangEnv) -> None:
    known = known_flags(env)
    if not known:
        return  # a tree without server_args.py: nothing to compare with
    missing = []
    for tok in argv:
        if tok.startswith("--"):
            name = tok.split("=", 1)[0]
            if _FLAG_RE.match(name) and name not in known:
                missing.append(name)
    if missing:
        raise _fail(f"SGLang {env.version} has no {', '.join(dict.fromkeys(missing))} "
                    f"(checked in {env.package_dir / 'srt'}/server_args.py and arg_groups/)")


# --------------------------------------------------------------------------------------------
# The SGLang argv + env a config becomes (what validate checks and server.Server runs)
# --------------------------------------------------------------------------------------------

def build_command(cfg: LaunchConfig, *, node_rank: int | None = None,
                  environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The exact argv (a list) and the env variables the wrapper adds to the user's env.

    NCCL preset values never override a variable already set in ``environ`` (default os.environ);
    ``cfg.env`` (set explicitly in a preset) wins over both.
    """
    environ = dict(os.environ if environ is None else environ)
    argv = [cfg.python or sys.executable, "-m", cfg.server_module, "--model-path", str(cfg.model)]
    if not cfg.no_spec:
        argv += ["--speculative-algorithm", normalise_algorithm(cfg.algorithm)]
        if cfg.draft:
            argv += ["--speculative-draft-model-path", str(cfg.draft)]
        if cfg.steps is not None:
            argv += ["--speculative-num-steps", str(cfg.steps)]
        if cfg.topk is not None:
            argv += ["--speculative-eagle-topk", str(cfg.topk)]
        if cfg.draft_tokens is not None:
            argv += ["--speculative-num-draft-tokens", str(cfg.draft_tokens)]
        if cfg.adaptive:
            argv += ["--speculative-adaptive", "--speculative-adaptive-config",
                     str(Path(cfg.adaptive).expanduser().absolute())]
    if cfg.tp is not None and cfg.tp != 1:
        argv += ["--tp-size", str(cfg.tp)]
    if cfg.nnodes > 1:
        argv += ["--nnodes", str(cfg.nnodes), "--node-rank", str(node_rank or 0),
                 "--dist-init-addr", str(cfg.dist_init_addr)]
    argv += ["--host", cfg.host, "--port", str(cfg.port)]
    argv += [str(a) for a in cfg.extra_args]

    env: dict[str, str] = {}
    nccl = (cfg.nccl or "none").strip()
    if nccl != "none":
        from ..runtime import nccl as nccl_mod

        for k, v in nccl_mod.preset_env(nccl).items():
            if k not in environ:  # the user's own value wins (same rule as nccl.apply_preset)
                env[k] = v
        # The plugin (0.5.11+) re-applies the preset inside every SGLang process.
        env[NCCL.name] = nccl
    if cfg.profile:
        env[PROFILE.name] = "1"
        if cfg.profile_every is not None:
            env[PROFILE_EVERY.name] = str(cfg.profile_every)
        if cfg.profile_mode:
            env[PROFILE_MODE.name] = cfg.profile_mode
        if cfg.profile_out:
            env[PROFILE_OUT.name] = str(Path(cfg.profile_out).expanduser().absolute())
        spec = cfg.spec_string()
        if spec:
            env[PROFILE_SPEC.name] = spec
    if cfg.aux_layers:
        from ..runtime.layers import (  # the one parser; normalised spelling
            format_layers,
            parse_layers,
        )

        env[AUX_LAYERS.name] = format_layers(parse_layers(str(cfg.aux_layers)))
    env.update(cfg.env)
    return argv, env


def node_commands(cfg: LaunchConfig, environ: dict[str, str] | None = None
                  ) -> list[tuple[list[str], dict[str, str]]]:
    """One (argv, env) per node for ``--nnodes N`` (same env everywhere, only --node-rank differs)."""
    return [build_command(cfg, node_rank=r, environ=environ) for r in range(cfg.nnodes)]


def validate(cfg: LaunchConfig, env: SGLangEnv, *, sglang_check: bool | None = None,
             environ: dict[str, str] | None = None) -> list[str]:
    """Check ``cfg`` against the rules of ``env``'s release; UserError(exit_code=2) on the first
    broken rule, nothing started. Returns notes (facts worth printing, not errors).

    ``sglang_check``: run SGLang's own resolution + checks in a child Python. ``None`` = when the
    importable SGLang is the release being checked (and ``cfg.sglang_check`` allows it).
    """
    notes: list[str] = []
    extra = extra_flags(list(cfg.extra_args))
    owned = [f for f in extra if f in OWNED_FLAGS]
    if owned:
        f = owned[0]
        raise _fail(f"{f} in the extra SGLang args: use the wrapper's {OWNED_FLAGS[f]} so it is validated")
    _check_basic(cfg)
    algo = None if cfg.no_spec else normalise_algorithm(cfg.algorithm)
    from .policy_launch import apply_policy  # --policy writes the config --adaptive then checks

    notes += apply_policy(cfg, env, extra)
    notes += apply_adaptive(cfg, env, extra)
    from .trees_launch import apply_hold, apply_trees  # after the adaptive start values

    notes += apply_hold(cfg, env)
    notes += apply_trees(cfg, env, extra)
    _check_spec_values(cfg, extra)
    notes += _check_models(cfg, env, algo)
    from ..runtime.layers import (
        check_aux_for_launch,  # count/range vs the local target + draft configs
    )

    check_aux_for_launch(cfg.aux_layers, cfg.model, cfg.draft, env.version)
    argv, env_add = build_command(cfg, environ=environ)
    child_env = dict(os.environ if environ is None else environ)
    child_env.update(env_add)
    if algo is not None:
        notes += _check_release_rules(cfg, env, extra, child_env)
    if cfg.profile and cfg.no_spec:
        notes.append("--profile with --no-spec: the probes sit in the EAGLE worker, so nothing is recorded")
    _check_flags_exist(argv, env)

    if sglang_check is None:
        sglang_check = cfg.sglang_check is not False
        if sglang_check and not importable_matches(env, cfg.python):
            sglang_check = False
            notes.append(f"SGLang's own checks skipped: the SGLang importable by {cfg.python or sys.executable} "
                         f"is not {env.version}")
    if sglang_check:
        notes += run_sglang_checks(argv, env=child_env, python=cfg.python)
    return notes
