"""What the plugin would do here (doctor, patch status), and in a process that loaded it what it did; never imports SGLang."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

from .. import nccl, stepctl
from ..sglang_env import SGLangEnv, locate
from . import procstate
from .hookplan import plan_hooks, probe_route, source_coverage, switches
from .procstate import (
    ENTRY_POINT,
    ENTRY_POINT_NAME,
    ENV_AUX,
    ENV_NCCL,
    ENV_PROFILE,
    OLD_ENTRY_POINT,
)

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
    cov = source_coverage(env)
    patched = cov["files"]
    info["sglang"] = {"version": env.version, "has_plugins": env.has_plugins}
    info["source_patch_files"] = patched
    info["source_patch_records"] = cov["roles"]
    plugin_ok = env.has_plugins and info["entry_point"] and _allowed_by_sglang(environ)
    decision = probe_route(cov, plugin_ok=bool(plugin_ok)) if patched else None
    if not sw["profile"]:
        route, why = "none", f"{ENV_PROFILE} is not set: nothing records"
    elif decision is not None:  # any mix of routes: the one that records, or why none can
        route, why = decision["route"], decision["why"]
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
        roles = decision["plugin_roles"] if decision is not None else None
        plan = plan_hooks(env, profile=sw["profile"] and roles != frozenset(), aux=bool(sw["aux_layers"]),
                          nccl_preset=bool(sw["nccl"]), step_control=step_control, refuse=refuse,
                          probe_roles=roles)
        info["plan"] = plan.to_dict()
    except Exception as exc:  # noqa: BLE001
        info["plan"] = {"error": str(exc)}
    if sw["nccl"]:
        try:
            preview = nccl.apply_preset(sw["nccl"], environ=dict(os.environ if environ is None else environ))
            info["nccl"] = preview.to_dict()
        except Exception as exc:  # noqa: BLE001
            info["nccl"] = {"preset": sw["nccl"], "error": str(exc)}
    if procstate._S.role:
        info["this_process"] = {"role": procstate._S.role, "registered": [h.target for h in procstate._S.registered],
                                "missing": procstate._S.missing, "route": procstate._S.route, "nccl": procstate._S.nccl,
                                "allreduce": procstate._S.allreduce, "notes": list(procstate._S.notes)}
    return info
