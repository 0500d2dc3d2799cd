"""SGLang plugin (entry point group ``sglang.srt.plugins``, SGLang 0.5.11+): phase hooks feeding
``probes``, the aux-layer override and the NCCL preset, in every SGLang process.

Inert unless asked: with none of ``EAGLE3_PROFILE=1``, ``SGLANG_EAGLE3_NCCL``,
``SGLANG_EAGLE3_AUX_LAYERS`` set, ``register()`` returns at once (no hook, no env change).

Probe hook targets are compiled from the same ``patches/*.yaml`` entries the source patcher
selects for the installed tree (one probe map for both routes), and each is checked in that
release's source (stdlib ``ast``, no import): a release that lacks a method gets no hook for it,
and says so. SGLang's
``HookRegistry`` only logs a target it cannot resolve, so after SGLang applies the hooks we check
each one we asked for and name every one that is missing (see ``_verify``). docs/plugin.md.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import nccl, settings, stepctl
from .marker import MARKER  # carried by every source-patched SGLang file
from .sglang_env import COMMON_FILE, V1_FILE, V2_FILE, SGLangEnv, locate

ENV_PROFILE = settings.PROFILE.name
ENV_NCCL = nccl.ENV
ENV_AUX = settings.AUX_LAYERS.name
ENTRY_POINT = "sglang_eagle3_ext.runtime.plugin:register"
# installs made before the move name the alias (same module object, sglang_eagle3_ext/_aliases.py)
OLD_ENTRY_POINT = "sglang_eagle3_ext.plugin:register"
ENTRY_POINT_NAME = "eagle3_ext"  # pyproject.toml [project.entry-points."sglang.srt.plugins"]

# SGLang process entry functions -> role; register() walks its caller frames (innermost first).
_ROLE_BY_FUNC = {
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "dp-controller",
}
_ROLE_BY_FILE = {"sglang/launch_server.py": "launcher", "sglang/cli/serve.py": "launcher"}
# Processes that never run a model worker: no hooks there (importing the targets costs seconds).
_NO_HOOK_ROLES = ("detokenizer", "dp-controller", "launcher")


# ------------------------------------------------------------------------------------------------
# Logging: our own stderr handler, because register() runs before SGLang configures logging in
# a spawned scheduler (INFO would be dropped) and stderr is what the server log captures.

class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (SGLang or pytest may swap it)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _make_logger() -> logging.Logger:
    log = logging.getLogger("sglang_eagle3_ext.plugin")
    if not log.handlers:
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("sglang-eagle3-ext plugin [pid %(process)d] %(levelname)s: %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


logger = _make_logger()


# ------------------------------------------------------------------------------------------------
# Switches and the plan (pure: reads files only, testable against every release's source)

def switches(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, Any]:
    """What this environment asks of the plugin, read through ``settings`` (bool / text: a value
    cannot be malformed here; the NCCL preset and the layers are judged where they are applied)."""
    return {
        "profile": bool(settings.PROFILE.get(environ)),
        "nccl": settings.NCCL.get(environ),
        "aux_layers": settings.AUX_LAYERS.get(environ),
        "step_control": stepctl.requested(environ)[0],  # "hold" / "policy" / None (docs/plugin.md)
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
               step_control: str | None = None, refuse: str | None = None) -> Plan:
    """The hooks this release needs for the requested switches. Probe hooks are compiled from the
    patch specs the source patcher selects for this tree (``patches/*.yaml``: one probe map for
    both routes), each checked against the release's source. ``step_control``: "hold" / "policy"
    (stepctl hooks on the adaptive controller); ``refuse``: a reason the server must not start."""
    plan = Plan(version=env.version)
    if not env.has_plugins:
        if profile or aux or nccl_preset or step_control:
            plan.problems.append(
                f"SGLang {env.version} has no plugin framework (0.5.11+): nothing is hooked; use "
                "`sgl-eagle3 patch apply` for probes/aux layers and `sgl-eagle3 launch --nccl` for NCCL")
        return plan
    if profile:
        _plan_probes(env, plan)
        if not any(h.role == "cycle" for h in plan.hooks):
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
    return plan


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
    from ..patcher.spec import load_specs, select

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
    plan.problems.append(f"{ENV_AUX}: no aux-capture funnel in SGLang {env.version}; "
                         "use `sgl-eagle3 patch apply` (it patches each model's set_eagle3_layers_to_capture)")


def patched_files(env: SGLangEnv) -> list[str]:
    """Eagle worker files of this install that carry the source-patch marker."""
    found = []
    for rel in (V1_FILE, V2_FILE, COMMON_FILE):
        p = env.path(rel)
        try:
            if p.is_file() and MARKER in p.read_text(encoding="utf-8"):
                found.append(str(p))
        except OSError:
            continue
    return found


# ------------------------------------------------------------------------------------------------
# Runtime state of this process

@dataclass
class _State:
    role: str = ""
    registered: list[Hook] = field(default_factory=list)
    missing: list[str] | None = None  # None: not verified yet
    route: str = "none"
    nccl: dict[str, Any] | None = None
    allreduce: str | None = None
    depth: int = 0
    spec: tuple = ()
    stepctl_checked: bool = False
    notes: list[str] = field(default_factory=list)


_S = _State()


@lru_cache(maxsize=1)
def _probes() -> Any:
    from . import probes

    return probes


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
    sw = switches()
    if not (sw["profile"] or sw["nccl"] or sw["aux_layers"] or sw["step_control"]):
        return
    from .errors import UserError

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
    if _S.role:  # load_plugins() is idempotent per process; a second manual call must be too
        return
    _S.role = _process_role()
    if sw["nccl"]:
        _apply_nccl(sw["nccl"])
    if _S.role in _NO_HOOK_ROLES:
        return
    if sw["profile"] and _S.role == "scheduler":  # families on /metrics from startup (docs/metrics.md)
        from .probes import metrics

        metrics.register_families()
    env = locate()
    profile = sw["profile"]
    if profile:
        patched = patched_files(env)
        if patched:
            profile = False
            _S.route = "source-patch"
            _note(f"source patch present ({', '.join(Path(p).name for p in patched)}): it records the "
                  "probes; plugin phase hooks stay off (one route only)")
    aux = bool(sw["aux_layers"])
    if aux:  # the one aux-layer parser; a bad value is logged once here, not at model load
        from .errors import UserError
        from .layers import parse_layers

        try:
            parse_layers(sw["aux_layers"])
        except UserError as exc:
            logger.error("%s=%s: %s; the aux-layer hook stays off", ENV_AUX, sw["aux_layers"], exc)
            aux = False
    step_control, refuse = stepctl.requested()
    plan = plan_hooks(env, profile=profile, aux=aux, nccl_preset=bool(sw["nccl"]),
                      step_control=step_control, refuse=refuse)
    for problem in plan.problems:
        logger.error(problem)
    if not plan.hooks:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for hook in plan.hooks:
        HookRegistry.register(hook.target, _make_hook(hook), HookType.AROUND)
        _S.registered.append(hook)
    if any(h.role == "cycle" for h in plan.hooks):
        _S.route = "plugin"
        _probes().set_spec_config(route="plugin")
        from .probes import tree  # additive: tree-aware probes (issue 24), stdlib-only module

        for target in tree.register_hooks(HookRegistry, HookType, env.package_dir, note=_note):
            _S.registered.append(Hook("tree", "tree", target))  # in our own applied-check
    _schedule_verify(HookRegistry)
    logger.info("registered %d hook(s) in SGLang %s (%s process): %s", len(plan.hooks), env.version,
                _S.role, ", ".join(f"{h.role}={h.target.rsplit('.', 2)[-2]}.{h.target.rsplit('.', 1)[-1]}" for h in plan.hooks))


def _note(msg: str) -> None:
    _S.notes.append(msg)
    logger.info(msg)


def _apply_nccl(name: str) -> None:
    from .errors import UserError

    try:
        report = nccl.apply_preset(name)
    except UserError as exc:
        logger.error("%s=%s: %s; NCCL env left unchanged", ENV_NCCL, name, exc)
        _S.nccl = {"preset": name, "error": str(exc)}
        return
    _S.nccl = report.to_dict()
    for line in report.lines():
        logger.info(line)


# ------------------------------------------------------------------------------------------------
# Verification: HookRegistry.apply_hooks() runs after register() returns (load_plugins), and a
# target it cannot resolve is only logged. We wrap apply_hooks once so the check runs right after
# SGLang's own apply; the first decode cycle re-checks in case apply_hooks was never called.

def _schedule_verify(registry: Any) -> None:
    original = registry.__dict__.get("apply_hooks")
    if not isinstance(original, classmethod) or getattr(original.__func__, "_eagle3_check", False):
        return

    def apply_then_check(cls: Any) -> None:
        try:
            original.__func__(cls)
        finally:
            if getattr(cls.__dict__.get("apply_hooks"), "__func__", None) is apply_then_check:
                cls.apply_hooks = original  # one shot: later calls are SGLang's own again
            _verify(registry)

    apply_then_check._eagle3_check = True  # type: ignore[attr-defined]
    registry.apply_hooks = classmethod(apply_then_check)


def _is_applied(registry: Any, target: str) -> bool:
    patched = getattr(registry, "_patched", None)
    if isinstance(patched, set):
        return target in patched
    import pkgutil

    try:  # a release without _patched: a wrapped attribute carries __wrapped__
        obj, attr = target.rsplit(".", 1)
        return hasattr(getattr(pkgutil.resolve_name(obj), attr), "__wrapped__")
    except Exception:  # noqa: BLE001
        return False


def _verify(registry: Any) -> list[str]:
    missing = [h.target for h in _S.registered if not _is_applied(registry, h.target)]
    _S.missing = missing
    if not missing:
        logger.info("all %d requested hook(s) applied", len(_S.registered))
        return missing
    for h in _S.registered:
        if h.target in missing and h.family == "stepctl":
            logger.error("HOOK NOT APPLIED: %s (%s): SGLang could not resolve or patch it; step counts are "
                         "not held in this process (with the init_states hook present it refuses to start)",
                         h.target, h.role)
        elif h.target in missing:
            logger.error("HOOK NOT APPLIED: %s (%s %s): SGLang could not resolve or patch it; the %s "
                         "numbers from this process are absent or wrong", h.target, h.family, h.role, h.role)
    logger.error("%d of %d requested hook(s) missing; for probes use `sgl-eagle3 patch apply` "
                 "(the source patch) on this SGLang instead", len(missing), len(_S.registered))
    return missing


def _stepctl_missing() -> list[str]:
    """Step-control targets this process asked for that SGLang did not apply (checked from the
    init_states hook, i.e. on every rank before it serves)."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry
    except Exception:  # noqa: BLE001
        return [h.target for h in _S.registered if h.family == "stepctl"]
    return [h.target for h in _S.registered if h.family == "stepctl" and not _is_applied(HookRegistry, h.target)]


def verify() -> list[str]:
    """Re-check now (tests, doctor in a live process): targets requested but not applied."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return _verify(HookRegistry)


# ------------------------------------------------------------------------------------------------
# The hooks

def _make_hook(hook: Hook) -> Callable[..., Any]:
    if hook.role == "cycle":
        return _cycle_hook(hook.detail)
    if hook.role in ("draft", "extend"):
        return _phase_hook(hook.role)
    if hook.role == "verify":
        field = hook.detail.get("field")  # V1: the verify_output field of this release (v1.yaml)
        return _verify_v1_hook(field) if field else _phase_hook("verify")
    if hook.role == "accept":  # accept.yaml accept_hook: read the parameter, or the result's fields
        if hook.detail.get("read") == "param":
            return _accept_param_hook()
        return _accept_result_hook(tuple(f for f in hook.detail.get("fields", "").split(",") if f))
    if hook.role == "aux":
        return _aux_hook(hook.detail["style"])
    if hook.role == "allreduce":
        return _allreduce_hook
    if hook.role == "stepctl-init":
        return stepctl.init_hook(hook.detail["decider"], _stepctl_missing, hook.detail.get("refuse"))
    if hook.role == "stepctl-activate":
        return stepctl.activate_hook
    if hook.role == "stepctl-verify":
        return stepctl.verify_hook
    raise ValueError(f"unknown hook role {hook.role}")


def _is_decode(batch: Any, rule: dict[str, str]) -> bool:
    """The branch the original will take, by the same test the release uses; idle (DP attention
    padding) batches are not cycles."""
    try:
        mode = batch.forward_mode
        if rule["rule"] == "is_decode":
            decode = bool(mode.is_decode())
        else:
            decode = not (mode.is_extend() or (rule.get("extend_in_batch") == "true" and batch.is_extend_in_batch))
        return decode and not mode.is_idle()
    except Exception:  # noqa: BLE001 - an unexpected batch shape: just do not record
        return False


def _is_idle(batch: Any) -> bool:
    try:
        return bool(batch.forward_mode.is_idle())
    except Exception:  # noqa: BLE001 - an unexpected batch shape: treat as nothing happened
        return True


def _cycle_hook(rule: dict[str, str]) -> Callable[..., Any]:
    arg = rule["arg"]

    def cycle(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        batch = args[0] if args else kwargs.get(arg)
        if _S.depth:
            return original(self, *args, **kwargs)
        if not _is_decode(batch, rule):
            if not _is_idle(batch):  # a prefill / extend: the cycles around it are boundaries
                _probes().mark_boundary("extend")
            return original(self, *args, **kwargs)
        probes = _probes()
        if _S.missing is None:
            verify()
        if not _S.stepctl_checked:  # once: by the first decode cycle init_states has run, if ever
            _S.stepctl_checked = True
            if any(h.family == "stepctl" for h in _S.registered) and stepctl.installed() is None:
                logger.error("step control was asked for but no adaptive controller built its states: "
                             "start SGLang with --speculative-adaptive (steps are not held)")
        spec = (getattr(self, "speculative_num_steps", None), getattr(self, "topk", None),
                getattr(self, "speculative_num_draft_tokens", None))
        if spec != _S.spec:  # adaptive steps change at runtime
            _S.spec = spec
            probes.set_spec_config(*spec, route="plugin")
        _S.depth += 1
        probes.cycle_begin()
        try:
            out = original(self, *args, **kwargs)
            _tag(probes, self, batch, out)
            return out
        finally:
            probes.cycle_end()
            _S.depth -= 1

    return cycle


def _batch_size(batch: Any) -> int | None:
    try:
        return int(batch.seq_lens.shape[0])  # what activate_step_by_batch is given (0.5.13+)
    except Exception:  # noqa: BLE001
        try:
            return len(batch.reqs)
        except Exception:  # noqa: BLE001
            return None


def _tag(probes: Any, worker: Any, batch: Any, out: Any) -> None:
    """The configuration that ran this cycle, read after the original returned (0.5.13+ switch
    inside it): the worker's steps / topk, the draft tokens the result was strided by, CUDA graph
    or eager from the result, the hold block."""
    try:
        dt = getattr(out, "speculative_num_draft_tokens", None)
        if not isinstance(dt, int):
            dt = getattr(worker, "speculative_num_draft_tokens", None)
        graph = getattr(out, "can_run_cuda_graph", None)
        probes.tag_cycle(getattr(worker, "speculative_num_steps", None), getattr(worker, "topk", None), dt,
                         _batch_size(batch), graph if isinstance(graph, bool) else None,
                         stepctl.current_block())
    except Exception:  # noqa: BLE001 - tagging never breaks a decode step
        pass


def _phase_hook(name: str) -> Callable[..., Any]:
    def phase(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not _S.depth:  # prefill / DP-coordination calls are not decode phases
            return original(*args, **kwargs)
        probes = _probes()
        probes.phase_begin(name)
        try:
            return original(*args, **kwargs)
        finally:
            probes.phase_end(name)

    return phase


def _verify_v1_hook(field: str) -> Callable[..., Any]:
    """V1 verify: timed, and the accepted drafts per request read from ``field`` of the returned
    verify output (the release's name for it, from v1.yaml ``accept.fields``)."""
    timed = _phase_hook("verify")

    def verify_v1(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        out = timed(original, *args, **kwargs)
        if _S.depth and isinstance(out, tuple):  # (logits, verify_output, ...) 0.5.11 / 0.5.12
            for item in out:
                counts = getattr(item, field, None)
                if counts is not None:
                    _probes().record_accept(list(counts), bonus_included=False)
                    break
        return out

    return verify_v1


def _accept_param_hook() -> Callable[..., Any]:
    """``read: param``: the method's first argument is the per-request correct-draft list."""

    def accept(original: Callable[..., Any], self: Any, num_correct_drafts_per_req: Any, *args: Any, **kwargs: Any) -> Any:
        if num_correct_drafts_per_req:
            _probes().record_accept(list(num_correct_drafts_per_req), bonus_included=False)
        return original(self, num_correct_drafts_per_req, *args, **kwargs)

    return accept


def _accept_result_hook(fields: tuple[str, ...]) -> Callable[..., Any]:
    """``read: result``: after the original, the first of ``fields`` present on its first argument."""

    def accept(original: Callable[..., Any], self: Any, result: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, result, *args, **kwargs)
        counts = next((getattr(result, f) for f in fields if getattr(result, f, None) is not None), None)
        if counts:
            _probes().record_accept(list(counts), bonus_included=False)
        return out

    return accept


def _aux_hook(style: str) -> Callable[..., Any]:
    """Around the funnel: while it runs, every module of the target model whose class defines
    ``set_eagle3_layers_to_capture`` gets an instance-level wrapper that asks
    ``layers.override_layer_ids`` first (nested delegation, e.g. KimiK25 -> DeepseekV3, is safe:
    the override is idempotent)."""

    def aux(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original).bind_partial(*args, **kwargs).arguments
        if style == "function":
            model, use = bound.get("model"), bound.get("eagle_use_aux_hidden_state")
        else:
            runner = bound.get("self", args[0] if args else None)
            model, use = getattr(runner, "model", None), getattr(runner, "eagle_use_aux_hidden_state", False)
        if not use or model is None:
            return original(*args, **kwargs)
        undo = _wrap_layer_setters(model)
        try:
            return original(*args, **kwargs)
        finally:
            undo()

    return aux


def _wrap_layer_setters(model: Any) -> Callable[[], None]:
    from . import layers

    name = "set_eagle3_layers_to_capture"
    mods = [model, *(model.modules() if hasattr(model, "modules") else ())]
    done: list[Any] = []
    seen: set[int] = set()
    for m in mods:
        if id(m) in seen or not callable(getattr(type(m), name, None)):
            continue
        seen.add(id(m))
        bound = getattr(m, name)

        def wrapper(layer_ids: Any = None, *a: Any, _m: Any = m, _bound: Any = bound, **kw: Any) -> Any:
            return _bound(layers.override_layer_ids(_m, layer_ids), *a, **kw)

        object.__setattr__(m, name, wrapper)
        done.append(m)

    def undo() -> None:
        for m in done:
            m.__dict__.pop(name, None)

    return undo


def _allreduce_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    out = original(*args, **kwargs)
    try:
        _report_allreduce_path()
    except Exception as exc:  # noqa: BLE001 - reporting must never break TP init
        logger.warning("could not inspect the TP all-reduce path: %s", exc)
    return out


# GroupCoordinator attributes (0.5.11-0.5.23) of the non-NCCL all-reduce implementations.
_AR_PATHS = (("ca_comm", "SGLang custom all-reduce"), ("pcie_ipc_comm", "FlashInfer PCIe-IPC all-reduce"),
             ("qr_comm", "quick all-reduce (ROCm)"), ("torch_symm_mem_comm", "torch symm-mem all-reduce"),
             ("pymscclpp_comm", "MSCCL++ all-reduce"))


def allreduce_paths(group: Any) -> list[str]:
    """Non-NCCL all-reduce implementations live on this TP group (they take the small ones)."""
    found = []
    for attr, label in _AR_PATHS:
        comm = getattr(group, attr, None)
        if comm is not None and not getattr(comm, "disabled", False):
            found.append(label)
    return found


def _report_allreduce_path() -> None:
    if _S.allreduce is not None:
        return
    from sglang.srt.distributed import parallel_state

    group = parallel_state.get_tp_group()
    size = int(getattr(group, "world_size", 1))
    paths = allreduce_paths(group)
    if size <= 1:
        _S.allreduce = "none (TP 1)"
        logger.info("TP size 1: no tensor-parallel all-reduce, the NCCL preset does not touch decode")
    elif paths:
        _S.allreduce = ", ".join(paths)
        logger.warning(
            "TP %d all-reduce path: %s active; the small decode all-reduces go there, not through "
            "NCCL, so the NCCL preset barely changes decode speed (it still shapes large/prefill "
            "collectives and fallbacks). A/B: relaunch with --disable-custom-all-reduce and compare tok/s",
            size, _S.allreduce)
    else:
        _S.allreduce = "NCCL"
        logger.info("TP %d all-reduce path: NCCL for every size; the NCCL preset is on the decode hot path", size)


# ------------------------------------------------------------------------------------------------
# describe(): for doctor / patch status; never imports SGLang

def entry_point_present() -> bool:
    try:
        eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    except Exception:  # noqa: BLE001
        return False
    return any(ep.value.replace(" ", "") in (ENTRY_POINT, OLD_ENTRY_POINT) for ep in eps)


def _allowed_by_sglang(environ: dict[str, str] | None) -> bool:
    """SGLang's allow-list: ``SGLANG_PLUGINS=a,b`` loads only the named entry points."""
    raw = (os.environ if environ is None else environ).get("SGLANG_PLUGINS", "")
    names = {x.strip() for x in raw.split(",") if x.strip()}
    return not names or ENTRY_POINT_NAME in names


def describe(env: SGLangEnv | None = None, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Entry point, switches, which route would record, the NCCL preset, and (in a process where
    SGLang loaded us) what was registered and whether it was applied."""
    sw = switches(environ)
    info: dict[str, Any] = {"entry_point": entry_point_present(), "switches": {
        ENV_PROFILE: sw["profile"], ENV_NCCL: sw["nccl"], ENV_AUX: sw["aux_layers"],
        "step_control": sw["step_control"]}}
    info["active"] = bool(sw["profile"] or sw["nccl"] or sw["aux_layers"] or sw["step_control"])
    info["loaded_by_sglang"] = _allowed_by_sglang(environ)
    try:
        env = env or locate()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        info["sglang"] = {"error": str(exc)}
        return info
    patched = patched_files(env)
    info["sglang"] = {"version": env.version, "has_plugins": env.has_plugins}
    info["source_patch_files"] = patched
    if not sw["profile"]:
        route, why = "none", f"{ENV_PROFILE} is not set: nothing records"
    elif patched:
        route, why = "source-patch", "the source patch is applied; plugin phase hooks stay off"
    elif env.has_plugins and info["entry_point"] and not _allowed_by_sglang(environ):
        route, why = "none", "SGLANG_PLUGINS is set and does not list eagle3_ext: SGLang skips the plugin"
    elif env.has_plugins and info["entry_point"]:
        route, why = "plugin", "HookRegistry AROUND hooks on the eagle worker phases"
    elif env.has_plugins:
        route, why = "none", "plugin entry point not installed (pip install -e . in SGLang's Python)"
    else:
        route, why = "none", f"SGLang {env.version} < 0.5.11 has no plugins: run `sgl-eagle3 patch apply`"
    info["route"], info["route_why"] = route, why
    step_control, refuse = stepctl.requested(environ)
    if step_control:  # what holding step counts can do on this release (scan, doctor)
        info["step_control"] = {**stepctl.plan(env), "decider": step_control, "refused": refuse}
    try:
        plan = plan_hooks(env, profile=sw["profile"] and not patched, aux=bool(sw["aux_layers"]),
                          nccl_preset=bool(sw["nccl"]), step_control=step_control, refuse=refuse)
        info["plan"] = plan.to_dict()
    except Exception as exc:  # noqa: BLE001
        info["plan"] = {"error": str(exc)}
    if sw["nccl"]:
        try:
            preview = nccl.apply_preset(sw["nccl"], environ=dict(os.environ if environ is None else environ))
            info["nccl"] = preview.to_dict()
        except Exception as exc:  # noqa: BLE001
            info["nccl"] = {"preset": sw["nccl"], "error": str(exc)}
    if _S.role:
        info["this_process"] = {"role": _S.role, "registered": [h.target for h in _S.registered],
                                "missing": _S.missing, "route": _S.route, "nccl": _S.nccl,
                                "allreduce": _S.allreduce, "notes": list(_S.notes)}
    return info
