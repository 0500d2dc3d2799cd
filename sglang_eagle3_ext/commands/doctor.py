"""`sgl-eagle3 doctor`: where SGLang is, which code family it has, what can be used, what is set."""

from __future__ import annotations

import argparse
import os

from .. import __version__
from ..runtime import settings
from ..runtime.sglang_env import locate
from .console import out, print_json

HELP = "Report the SGLang install, its EAGLE worker family, usable routes, patch state and env."

# Env that changes how a speculative server behaves or how we measure it.
ENV_PREFIXES = ("NCCL_", *settings.PREFIXES, "SGLANG_ENABLE_SPEC_V2",
                "SGLANG_PLUGINS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _torch_info() -> dict:
    """torch / CUDA / GPU count, only when torch imports (it is the user's, never ours)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure just means "not usable here"
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    cuda = torch.cuda.is_available()
    return {
        "available": True,
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
    }


def _patch_summary(env) -> dict | None:
    try:
        from ..patcher import engine
    except ImportError:
        return None
    try:
        return engine.status_summary(env)
    except Exception as exc:  # noqa: BLE001 - doctor reports, it never fails on a sub-check
        return {"error": str(exc)}


def _plugin_summary(env) -> dict | None:
    try:
        from ..runtime.plugin import overview
    except ImportError:
        return None
    return overview.describe(env)  # the tree doctor looks at (--sglang-root), not the default one


def collect(sglang_root: str | None) -> dict:
    env = locate(sglang_root)
    return {
        "tool_version": __version__,
        "sglang": env.to_dict(),
        "patch": _patch_summary(env),
        "plugin": _plugin_summary(env),
        "torch": _torch_info(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }


def _print_patch(p: dict | None) -> None:
    if p is None:
        return
    if "error" in p:
        out.print(f"source patch: cannot tell ({p['error']})", markup=False)
        return
    line = f"source patch: {p.get('state')}"
    if p.get("patches"):
        line += f" ({', '.join(p['patches'])}; {p.get('patched_files')} file(s))"
    if p.get("aux_layers"):
        line += f", aux layers {p['aux_layers']}"
    if p.get("drifted"):
        line += f"; DRIFTED: {', '.join(p['drifted'])} (see `sgl-eagle3 patch status`)"
    out.print(line, markup=False)


def _print_plugin(d: dict | None) -> None:
    if d is None:
        return
    if not d.get("entry_point"):
        out.print("plugin: entry point not installed (pip install this package into SGLang's env)")
        return
    on = [k for k, v in (d.get("switches") or {}).items() if v]
    out.print(f"plugin: installed; switches set: {', '.join(on) or 'none (inert)'}", markup=False)
    out.print(f"  probes recorded by: {d.get('route')} ({d.get('route_why')})", markup=False)
    n = d.get("nccl")
    if n:
        out.print(f"  NCCL preset {n.get('preset')}: applies {n.get('applied') or {}}, "
                  f"keeps the user's {n.get('kept') or {}}", markup=False)
    for problem in (d.get("plan") or {}).get("problems") or []:
        out.print(f"  problem: {problem}", markup=False)


def run(args: argparse.Namespace) -> int:
    info = collect(args.sglang_root)
    if args.json:
        print_json(info)
        return 0
    s = info["sglang"]
    out.print(f"[bold]sgl-eagle3 {info['tool_version']}[/]")
    out.print(f"SGLang {s['version']} ({s['source']}) at {s['package_dir']}")
    out.print(f"  eagle worker families: {', '.join(s['families']) or 'none found'}")
    out.print(f"  EAGLE-3 decode runs on: {s['decode_worker']}")
    routes = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in s["routes"].items())
    out.print(f"  probe routes: {routes}")
    out.print(f"  speculative registry (0.5.12+): {'yes' if s['has_spec_registry'] else 'no'}")
    _print_patch(info["patch"])
    _print_plugin(info["plugin"])
    t = info["torch"]
    if t["available"]:
        gpus = f"{t['gpu_count']} GPU(s) {t['gpu_name'] or ''}".strip()
        out.print(f"torch {t['version']} (CUDA {t['cuda'] or 'none'}), {gpus}")
    else:
        out.print(f"torch: not importable ({t['error']})")
    if info["env"]:
        out.print("env in effect:")
        for k, v in info["env"].items():
            out.print(f"  {k}={v}")
    else:
        out.print("env in effect: no NCCL_*, EAGLE3_PROFILE* or SGLANG_EAGLE3_* variables set")
    return 0
