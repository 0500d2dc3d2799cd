"""The hooks a process needs (pure: reads SGLang's files, never imports them): compiled from the one probe map, checked against the release's source."""

from __future__ import annotations

import ast
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import settings, stepctl
from ..marker import MARKER  # noqa: F401 - carried by every source-patched SGLang file (re-exported)
from ..routes import PROBE_ROLES, probe_route, source_coverage  # noqa: F401 - re-exported
from ..sglang_env import SGLangEnv

# ------------------------------------------------------------------------------------------------
# Switches and the plan (pure: reads files only, testable against every release's source)

def switches(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, Any]:
    """What this environment asks of the plugin, read through ``settings`` (bool / text: a value
    cannot be malformed here; the NCCL preset and the layers are judged where they are applied)."""
    return {
        "profile": bool(settings.PROFILE.get(environ)),
        "nccl": settings.NCCL.get(environ),
        "aux_layers": settings.AUX_LAYERS.get(environ),
        "step_control": stepctl.requested(environ)[0],  # "hold" / "policy" / None (docs/reference/plugin.md)
        "trees": settings.TREES.is_set(environ),  # trees beside the chains (treeswitch.py)
    }


@dataclass(frozen=True)
class Hook:
    """One AROUND hook: ``role`` in cycle/draft/verify/extend/accept/aux/allreduce."""

    role: str
    family: str  # "v2", "v1", "aux", "nccl"
    target: str
    detail: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    entry: str = field(default="", compare=False)  # the patches/*.yaml entry it was compiled from


@dataclass
class Plan:
    version: str
    hooks: list[Hook] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # asked for, cannot be hooked here

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "hooks": [asdict(h) for h in self.hooks],
                "notes": list(self.notes), "problems": list(self.problems)}


class _Source:
    """Classes -> methods and module-level functions of one SGLang file (None when absent)."""

    def __init__(self, env: SGLangEnv, rel: str) -> None:
        self.module = "sglang." + rel[: -len(".py")].replace("/", ".")
        self.path = env.path(rel)
        self.tree: ast.Module | None = None
        if self.path.is_file():
            self.tree = ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))

    def method(self, cls: str, name: str) -> ast.FunctionDef | None:
        for node in self.tree.body if self.tree else []:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == name:
                        return item
        return None

    def function(self, name: str) -> ast.FunctionDef | None:
        for node in self.tree.body if self.tree else []:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None

    def target(self, *parts: str) -> str:
        return ".".join((self.module, *parts))


def plan_hooks(env: SGLangEnv, *, profile: bool, aux: bool, nccl_preset: bool,
               step_control: str | None = None, refuse: str | None = None,
               probe_roles: frozenset[str] | None = None, trees: str | None = None) -> Plan:
    """The hooks this release needs for the requested switches. Probe hooks are compiled from the
    patch specs the source patcher selects for this tree (``patches/*.yaml``: one probe map for
    both routes), each checked against the release's source. ``step_control``: "hold" / "policy"
    (stepctl hooks on the adaptive controller); ``refuse``: a reason the server must not start.
    ``probe_roles``: only these probe roles (``probe_route``: what a partial source patch lacks).
    ``trees``: "scheduler" / "launcher" (the hooks that process needs) when trees are held."""
    plan = Plan(version=env.version)
    if not env.has_plugins:
        if profile or aux or nccl_preset or step_control or trees:
            plan.problems.append(
                f"SGLang {env.version} has no plugin framework (0.5.11+): nothing is hooked; use "
                "`sgl-eagle3 patch apply` for probes/aux layers and `sgl-eagle3 launch --nccl` for NCCL")
        return plan
    if profile:
        _plan_probes(env, plan)
        if probe_roles is not None:
            plan.hooks = [h for h in plan.hooks if h.role in probe_roles]
        if (probe_roles is None or "cycle" in probe_roles) and not any(h.role == "cycle" for h in plan.hooks):
            plan.problems.append("no EAGLE worker with a known decode branch: probes cannot record")
    if aux:
        _plan_aux(env, plan)
    if nccl_preset:
        ps = _Source(env, "srt/distributed/parallel_state.py")
        if ps.function("initialize_model_parallel"):
            plan.hooks.append(Hook("allreduce", "nccl", ps.target("initialize_model_parallel")))
        else:
            plan.notes.append("no parallel_state.initialize_model_parallel: all-reduce path not reported")
    if step_control:
        _plan_stepctl(env, plan, step_control, refuse)
    if trees:
        _plan_trees(env, plan, launcher_only=trees == "launcher")
    return plan


def _plan_trees(env: SGLangEnv, plan: Plan, launcher_only: bool = False) -> None:
    """The hooks that hold trees beside the adaptive chains (treeswitch.py), each checked in this
    release's source. Any target missing: no tree hook at all, and the reason as a problem (the
    init_states hook then refuses to start: a tree half hooked would write KV out of bounds)."""
    from .. import treeswitch

    def has(rel: str, cls: str, meth: str) -> bool:
        src = _Source(env, rel)
        return bool(src.method(cls, meth) if cls else src.function(meth))

    targets, missing = treeswitch.plan_targets(str(env.version), has)
    if missing:
        plan.problems.append(f"trees: SGLang {env.version} lacks {', '.join(missing)}; trees cannot be "
                             f"held beside chains here (checked on {', '.join(treeswitch.RELEASES)})")
        return
    for role, rel, cls, meth in targets:
        if launcher_only and role not in treeswitch.LAUNCHER_ROLES:
            continue
        src = _Source(env, rel)
        plan.hooks.append(Hook(role, "trees", src.target(*(p for p in (cls, meth) if p))))
    plan.notes.append(f"trees held beside chains: {len(targets)} hooks ({env.version})")


def _plan_stepctl(env: SGLangEnv, plan: Plan, name: str, refuse: str | None) -> None:
    """The step-control hooks on the adaptive controller (stepctl.plan checks the release source).
    A request this release or environment cannot serve: one hook on ``init_states`` (where there is
    one) that refuses to start with the reason, so a server never runs with the schedule silently off."""
    sp = stepctl.plan(env)
    src = _Source(env, stepctl.ADAPTIVE_FILE)
    why = refuse or (None if sp["ok"] else sp["reason"])
    if why:
        plan.problems.append(f"step control ({name}): {why}")
        if src.method(stepctl.CONTROLLER, "init_states"):
            plan.hooks.append(Hook("stepctl-init", "stepctl", src.target(stepctl.CONTROLLER, "init_states"),
                                   {"decider": name, "refuse": why}))
        return
    for role, meth in (("stepctl-init", "init_states"), ("stepctl-activate", "activate_step_by_batch"),
                       ("stepctl-verify", "on_verify_complete")):
        plan.hooks.append(Hook(role, "stepctl", src.target(stepctl.CONTROLLER, meth), {"decider": name}))
    plan.notes.append(sp["reason"])


def probe_entries(env: SGLangEnv) -> list[Any]:
    """The probe and accept specs the source patcher would apply to this tree (its own loader and
    selection; aux-layer specs need an option and stay out). Imported here, not at module level:
    the spec loader needs PyYAML, and this module imports only the standard library."""
    from ..probemap import load_specs, select

    return [p for p in select(load_specs(), env, only=None, options={})
            if p.kind == "decode-probes" or p.accept_hook]


_FAMILY_ORDER = ("v2", "v1")
_ROLE_ORDER = ("cycle", "draft", "verify", "extend", "accept")


def _route_family(patch: Any) -> str:
    """"v1" / "v2" from the spec's worker families (V1c -> v1, V2-beta / V2a -> v2)."""
    return patch.family[0][:2].lower() if patch.family else "?"


def _plan_probes(env: SGLangEnv, plan: Plan) -> None:
    hooks: list[Hook] = []
    for patch in probe_entries(env):
        src = _Source(env, patch.file)
        if patch.kind == "decode-probes":
            hooks += _compile_cycle(env, patch, src, plan)
        else:
            hooks += _compile_accept(patch, src, plan)
    hooks.sort(key=lambda h: (_FAMILY_ORDER.index(h.family), _ROLE_ORDER.index(h.role)))
    plan.hooks += hooks


def _compile_cycle(env: SGLangEnv, patch: Any, src: _Source, plan: Plan) -> list[Hook]:
    """The entry method = the cycle hook; each anchor's ``hook`` = that phase's target."""
    fam, where = _route_family(patch), f"{patch.name} ({patch.source})"
    if src.tree is None:
        return []
    name = next((m for m in patch.method if src.method(patch.cls, m)), None)
    entry = src.method(patch.cls, name) if name else None
    rule = decode_rule(entry, patch.decode_branch) if entry else None
    if rule is None:
        plan.problems.append(f"{fam.upper()}: cannot tell the decode branch of "
                             f"{src.target(patch.cls, '/'.join(patch.method))} ({where})")
        return []
    hooks = [Hook("cycle", fam, src.target(patch.cls, name), rule, patch.name)]
    for anc in patch.anchors:
        if not anc.hook:
            plan.problems.append(f"{where}: anchor {anc.phase} has no plugin `hook`")
            continue
        cls, meth = anc.hook.split(".")
        if not src.method(cls, meth):
            plan.problems.append(f"{fam.upper()}: {src.target(cls, meth)} not in this release: no {anc.phase} phase")
            continue
        detail = {}
        if anc.phase == "verify" and patch.accept:  # V1: accepts come back from verify itself
            detail = {"accept": "from the verify return (bonus excluded)",
                      "field": patch.accept_field(env.version) or ""}
        hooks.append(Hook(anc.phase, fam, src.target(cls, meth), detail, patch.name))
    return hooks


def _compile_accept(patch: Any, src: _Source, plan: Plan) -> list[Hook]:
    spec = patch.accept_hook
    fam = _route_family(patch)
    cls, meth = spec["hook"].split(".")
    if not src.method(cls, meth):
        plan.problems.append(f"{fam.upper()}: {src.target(cls, meth)} not in this release ({patch.name}): "
                             "accept length unmeasured")
        return []
    detail = {"source": spec["source"], "read": spec["read"], "fields": ",".join(spec.get("fields") or ())}
    return [Hook("accept", fam, src.target(cls, meth), detail, patch.name)]


def decode_rule(fn: ast.FunctionDef, branch: tuple[dict[str, str], ...] = ()) -> dict[str, str] | None:
    """How the entry method picks its decode branch, from its first top-level ``if``, one of the
    spec's ``decode_branch`` alternatives (empty: either): ``else_of: forward_mode.is_extend`` ->
    ``not_extend`` (``if X.forward_mode.is_extend() or X.is_extend_in_batch: prefill else: decode``),
    ``if: forward_mode.is_decode`` -> ``is_decode``. None: no alternative matches, no cycle hook."""
    allowed = {("is_decode" if b.get("if") == "forward_mode.is_decode" else "not_extend") for b in branch} \
        or {"is_decode", "not_extend"}
    args = [a.arg for a in fn.args.args]
    arg = args[1] if len(args) > 1 else ""
    for node in fn.body:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if f"{arg}.forward_mode.is_decode()" in test and " or " not in test and "is_decode" in allowed:
                return {"rule": "is_decode", "arg": arg}
            if f"{arg}.forward_mode.is_extend()" in test and "not_extend" in allowed:
                in_batch = "true" if f"{arg}.is_extend_in_batch" in test else "false"
                return {"rule": "not_extend", "arg": arg, "extend_in_batch": in_batch}
            return None
    return None


def _plan_aux(env: SGLangEnv, plan: Plan) -> None:
    """One funnel per release calls ``model.set_eagle3_layers_to_capture(ids)``: hooking it reaches
    every model class without importing any model module."""
    setup = _Source(env, "srt/model_executor/model_runner_components/attention_backend_setup.py")
    if setup.function("configure_aux_hidden_state_capture"):  # 0.5.16+
        plan.hooks.append(Hook("aux", "aux", setup.target("configure_aux_hidden_state_capture"),
                               {"style": "function"}))
        return
    runner = _Source(env, "srt/model_executor/model_runner.py")
    if runner.method("ModelRunner", "init_aux_hidden_state_capture"):  # 0.5.11-0.5.15
        plan.hooks.append(Hook("aux", "aux", runner.target("ModelRunner", "init_aux_hidden_state_capture"),
                               {"style": "runner"}))
        return
    plan.problems.append(f"{settings.AUX_LAYERS.name}: no aux-capture funnel in SGLang {env.version}; "
                         "use `sgl-eagle3 patch apply` (it patches each model's set_eagle3_layers_to_capture)")


