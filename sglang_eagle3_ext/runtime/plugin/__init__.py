"""SGLang plugin (entry point group ``sglang.srt.plugins``, SGLang 0.5.11+): phase hooks feeding
``probes``, the aux-layer override and the NCCL preset, in every SGLang process.

Inert unless asked: with none of ``EAGLE3_PROFILE=1``, ``SGLANG_EAGLE3_NCCL``,
``SGLANG_EAGLE3_AUX_LAYERS`` set, ``register()`` returns at once (no hook, no env change).

Probe hook targets are compiled from the same ``patches/*.yaml`` entries the source patcher
selects for the installed tree (one probe map for both routes), and each is checked in that
release's source (stdlib ``ast``, no import): a release that lacks a method gets no hook for it,
and says so. SGLang's
``HookRegistry`` only logs a target it cannot resolve, so after SGLang applies the hooks we check
each one we asked for and name every one that is missing (see ``_verify``). docs/reference/plugin.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import nccl, stepctl
from ..sglang_env import locate
from . import hookplan, procstate
from .apply_check import _schedule_verify
from .hookplan import Hook
from .procstate import ENV_AUX, ENV_NCCL, _probes, logger
from .wrappers import _make_hook

# SGLang process entry functions -> role; register() walks its caller frames (innermost first).
_ROLE_BY_FUNC = {
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "dp-controller",
}
_ROLE_BY_FILE = {"sglang/launch_server.py": "launcher", "sglang/cli/serve.py": "launcher"}
# Processes that never run a model worker: no hooks there (importing the targets costs seconds).
_NO_HOOK_ROLES = ("detokenizer", "dp-controller", "launcher")


def _process_role() -> str:
    f = sys._getframe(1)
    while f is not None:
        role = _ROLE_BY_FUNC.get(f.f_code.co_name)
        if role:
            return role
        fname = f.f_code.co_filename.replace(os.sep, "/")
        for suffix, r in _ROLE_BY_FILE.items():
            if fname.endswith(suffix):
                return r
        f = f.f_back
    return "other"


def register() -> None:
    """Entry point SGLang's ``load_plugins()`` calls in every process. Never raises: a plugin error
    must not take a server down (SGLang would only log it), so we log it ourselves, loudly."""
    sw = hookplan.switches()
    if not (sw["profile"] or sw["nccl"] or sw["aux_layers"] or sw["step_control"] or sw["trees"]):
        return
    from ..errors import UserError

    try:
        _register(sw)
    except (UserError, SyntaxError, UnicodeDecodeError, OSError) as exc:
        # the installed SGLang is the problem (a worker that does not compile, an unreadable
        # file): one line that says so; a traceback would only point at our planner
        why = f"{exc.msg} in {exc.filename}, line {exc.lineno}" if isinstance(exc, SyntaxError) else str(exc)
        logger.warning("not registered (%s); this process runs without the plugin", why)
    except Exception:  # noqa: BLE001 - see docstring; anything else is our bug: say where
        logger.exception("registration failed; this process runs without the plugin")


def _register(sw: dict[str, Any]) -> None:
    if procstate._S.role:  # load_plugins() is idempotent per process; a second manual call must be too
        return
    procstate._S.role = _process_role()
    if sw["nccl"]:
        _apply_nccl(sw["nccl"])
    trees_refuse = _configure_trees(sw) if sw["trees"] else None
    if procstate._S.role in _NO_HOOK_ROLES:
        if sw["trees"] and not trees_refuse and procstate._S.role == "launcher":
            _register_launcher_trees()  # the tokenizer's reserve is sized in the launcher
        return
    if sw["profile"] and procstate._S.role == "scheduler":  # families on /metrics from startup (docs/guide/metrics.md)
        from ..probes import metrics

        metrics.register_families()
    env = locate()
    profile = sw["profile"]
    roles = None
    if profile:
        cov = hookplan.source_coverage(env)
        if cov["files"]:  # whatever mix of routes the tree holds: one that records, or why none can
            decision = hookplan.probe_route(cov, plugin_ok=True)
            roles = decision["plugin_roles"]
            procstate._S.route = decision["route"]
            profile = bool(roles)
            _note(decision["why"])
    aux = bool(sw["aux_layers"])
    if aux:  # the one aux-layer parser; a bad value is logged once here, not at model load
        from ..errors import UserError
        from ..layers import parse_layers

        try:
            parse_layers(sw["aux_layers"])
        except UserError as exc:
            logger.error("%s=%s: %s; the aux-layer hook stays off", ENV_AUX, sw["aux_layers"], exc)
            aux = False
    step_control, refuse = stepctl.requested()
    refuse = refuse or trees_refuse
    if trees_refuse and not step_control:
        step_control = "trees"  # only to carry the refusal: init_states then refuses to start
    trees = "scheduler" if sw["trees"] and not trees_refuse else None
    plan = hookplan.plan_hooks(env, profile=profile, aux=aux, nccl_preset=bool(sw["nccl"]),
                               step_control=step_control, refuse=refuse, probe_roles=roles, trees=trees)
    if trees and any(p.startswith("trees:") for p in plan.problems):
        # half a tree is worse than none: the init_states hook refuses to start, saying why
        why = next(p for p in plan.problems if p.startswith("trees:"))
        plan = hookplan.plan_hooks(env, profile=profile, aux=aux, nccl_preset=bool(sw["nccl"]),
                                   step_control=step_control or "hold", refuse=why, probe_roles=roles)
    HookRegistry = _register_plan(plan)  # noqa: N806 - SGLang's class, by its own name
    if HookRegistry is None:
        return
    if any(h.role in hookplan.PROBE_ROLES for h in plan.hooks):
        procstate._S.route = procstate._S.route if roles else "plugin"
        _probes().set_spec_config(route="plugin")  # merged with the source patch's own ("plugin+source-patch")
    if any(h.role == "cycle" for h in plan.hooks):
        from sglang.srt.plugins.hook_registry import HookType

        from ..probes import tree  # additive: tree-aware probes, stdlib-only module

        for target in tree.register_hooks(HookRegistry, HookType, env.package_dir, note=_note):
            procstate._S.registered.append(Hook("tree", "tree", target))  # in our own applied-check
    _schedule_verify(HookRegistry)
    logger.info("registered %d hook(s) in SGLang %s (%s process): %s", len(plan.hooks), env.version,
                procstate._S.role, ", ".join(f"{h.role}={h.target.rsplit('.', 2)[-2]}.{h.target.rsplit('.', 1)[-1]}" for h in plan.hooks))


def _configure_trees(sw: dict[str, Any]) -> str | None:
    """Read the trees asked for; the reason they cannot be held, or None."""
    from .. import treeswitch

    try:
        trees, why = treeswitch.requested()
    except ValueError as exc:
        trees, why = [], str(exc)
    if why:
        logger.error("trees: %s", why)
        return why
    treeswitch.configure(trees)
    if procstate._S.role != "scheduler" and procstate._S.role != "launcher":
        return None
    try:  # 0.5.16 caches the max draft tokens on ServerArgs: HookRegistry cannot wrap it
        from ..sglang_env import locate

        if str(locate().version).startswith("0.5.16"):
            treeswitch.patch_server_args_0516()
    except Exception as exc:  # noqa: BLE001 - one line; the sizing check at init refuses
        logger.error("trees: ServerArgs not patched (%s)", exc)
    return None


def _register_plan(plan: hookplan.Plan) -> Any:
    """Log the plan's problems and register its hooks (AROUND) with SGLang's HookRegistry; the
    registry, or None when the plan has no hook."""
    for problem in plan.problems:
        logger.error(problem)
    if not plan.hooks:
        return None
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for hook in plan.hooks:
        HookRegistry.register(hook.target, _make_hook(hook), HookType.AROUND)
        procstate._S.registered.append(hook)
    return HookRegistry


def _register_launcher_trees() -> None:
    plan = hookplan.plan_hooks(locate(), profile=False, aux=False, nccl_preset=False, trees="launcher")
    registry = _register_plan(plan)
    if registry is not None:
        _schedule_verify(registry)


def _note(msg: str) -> None:
    procstate._S.notes.append(msg)
    logger.info(msg)


def _apply_nccl(name: str) -> None:
    from ..errors import UserError

    try:
        report = nccl.apply_preset(name)
    except UserError as exc:
        logger.error("%s=%s: %s; NCCL env left unchanged", ENV_NCCL, name, exc)
        procstate._S.nccl = {"preset": name, "error": str(exc)}
        return
    procstate._S.nccl = report.to_dict()
    for line in report.lines():
        logger.info(line)
