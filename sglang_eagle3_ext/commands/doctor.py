"""`sgl-eagle3 doctor`: what this machine can and cannot do, and why, in one screen.

Where SGLang is (or that it is not), its code family and probe routes, whether its server
imports here, patch and plugin state, torch and the GPU, the variables in effect (unknown names
and unusable values flagged), then one line per kind of work: yes / no and the reason.
Works with or without SGLang: a missing or broken SGLang is reported, never refused.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Any

from .. import __version__
from ..runtime import settings
from ..runtime.errors import UserError
from .console import out, print_json

HELP = ("What this machine can and cannot do, and why: SGLang (or its absence), whether its server imports, "
        "GPU, patch and plugin state, the variables in effect (misspelt names and bad values flagged).")

# Env that changes how a speculative server behaves or how we measure it.
ENV_PREFIXES = ("NCCL_", *settings.PREFIXES, "EAGLE3_", "SGLANG_ENABLE_SPEC_V2",
                "SGLANG_PLUGINS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS")
OURS = (*settings.PREFIXES, "EAGLE3_")  # a name here that we do not declare is a typo
# What a server start needs from SGLang: its HTTP server and everything that pulls in (a CPU box
# with SGLang installed without its CUDA dependencies fails here, e.g. on torchvision).
SERVER_MODULE = "sglang.srt.entrypoints.http_server"
IMPORT_TIMEOUT_S = 180.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--quick", action="store_true",
                   help=f"skip importing SGLang's server in a child Python ({SERVER_MODULE}: 8-30 s); "
                        "whether a server can start is then not known")
    p.add_argument("--recheck", action="store_true",
                   help="import SGLang's server again even if this Python's packages did not change since "
                        "the last doctor (the answer is kept until something is installed or removed)")


# ------------------------------------------------------------------ the checks


def _torch_info() -> dict:
    """torch / CUDA / GPU count, only when torch imports (it is the user's, never ours)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure just means "not usable here"
        return {"available": False, "error": f"{type(exc).__name__}: {exc}", **_nvidia_smi()}
    cuda = torch.cuda.is_available()
    return {
        "available": True,
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": cuda,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
    }


def _nvidia_smi() -> dict:
    """Without torch: does the machine have NVIDIA GPUs at all (``nvidia-smi -L``)?"""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"nvidia_smi_gpus": None}
    try:
        p = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {"nvidia_smi_gpus": None}
    return {"nvidia_smi_gpus": sum(1 for ln in p.stdout.splitlines() if ln.startswith("GPU "))}


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
    try:
        return overview.describe(env)  # the tree doctor looks at (--sglang-root), not the default one
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)}


def _import_key(env) -> str:
    """What the import's answer depends on: this Python, the release, the folders its packages
    live in (their mtime moves when a package is installed or removed) and PYTHONPATH."""
    import json

    dirs = {str(env.package_dir.parent)}
    for name in ("torch", "torchvision"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin:
            dirs.add(str(os.path.dirname(os.path.dirname(spec.origin))))
    stamps = {d: os.stat(d).st_mtime_ns for d in sorted(dirs) if os.path.isdir(d)}
    return json.dumps([sys.executable, env.version, stamps, os.environ.get("PYTHONPATH", "")])


def _cache_file():
    from ..runtime.resources import cache_root

    return cache_root() / "doctor-import.json"


def _cached_import(key: str) -> dict | None:
    import json

    try:
        doc = json.loads(_cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError, UserError):
        return None
    return doc.get("result") if isinstance(doc, dict) and doc.get("key") == key else None


def _keep_import(key: str, result: dict) -> None:
    if result.get("ok") is None or "took over" in str(result.get("why")):
        return  # not tried, or a slow machine: ask again next time
    try:
        from ..documents.jsonio import write_json

        write_json(_cache_file(), {"key": key, "result": result})
    except Exception:  # noqa: BLE001 - a cache we cannot write only costs the next doctor time
        pass


def _start_import(env, quick: bool, recheck: bool = False) -> subprocess.Popen | str | dict:
    """Import SGLang's server in a child Python (whatever it writes to its environment stays
    there); a reason string when not tried; the kept answer when nothing changed since."""
    if quick:
        return "not tried (--quick)"
    if env is None:
        return "not tried (no SGLang)"
    if env.source != "installed":
        return "not tried (an unpacked tree given with --sglang-root is not what this Python imports)"
    if not recheck:
        kept = _cached_import(_import_key(env))
        if kept:
            return {**kept, "kept": True}
    child_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        return subprocess.Popen([sys.executable, "-c", f"import {SERVER_MODULE}"], env=child_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        return f"not tried ({exc.strerror})"


def _finish_import(child: subprocess.Popen | str | dict) -> dict:
    if isinstance(child, dict):
        return child
    if isinstance(child, str):
        return {"ok": None, "why": child}
    try:
        _, errtext = child.communicate(timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"ok": False, "why": f"importing {SERVER_MODULE} took over {IMPORT_TIMEOUT_S:.0f} s"}
    finally:
        if child.poll() is None:  # Ctrl-C while waiting: never leave the child behind
            child.kill()
    if child.returncode == 0:
        return {"ok": True, "why": f"{SERVER_MODULE} imports"}
    lines = [ln for ln in (errtext or "").strip().splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exit {child.returncode}"
    return {"ok": False, "why": last}


def env_problems(environ: dict[str, str] | None = None) -> dict[str, str]:
    """NAME -> why, for our variables that are unknown (with a did-you-mean) or unusable
    (the parser's reason; a preset or layer list that does not parse)."""
    env = dict(os.environ if environ is None else environ)
    known = [s.name for s in settings.ALL] + [s.old for s in settings.ALL if s.old]
    problems: dict[str, str] = {}
    for name, raw in sorted(env.items()):
        if not name.startswith(OURS):
            continue
        s = settings.BY_NAME.get(name) or next((x for x in settings.ALL if x.old == name), None)
        if s is None:
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            problems[name] = ("not a variable of sglang-eagle3-ext, nothing reads it"
                              + (f"; did you mean {near[0]}?" if near else " (docs/reference/architecture.md "
                                                                          "lists them)"))
            continue
        _, why = s.read({name: raw})
        if why is None and raw.strip():
            why = _deeper(s, raw)
        if why:
            problems[name] = why
    return problems


def _deeper(s: settings.Setting, raw: str) -> str | None:
    """Values our parser takes as text but a later reader refuses: say so now."""
    try:
        if s is settings.NCCL:
            from ..runtime import nccl

            nccl.preset_env(raw)
        elif s is settings.AUX_LAYERS:
            from ..runtime.layers import parse_layers

            parse_layers(raw)
        elif s is settings.POLICY:
            path = settings.POLICY.get({s.name: raw})
            if path is not None and not path.exists():
                return f"{s.name}={raw!r}: no such file"
    except UserError as exc:
        return f"{s.name}={raw!r}: {exc}"
    return None


def _locate(sglang_root: str | None) -> tuple[Any, str | None]:
    """The SGLang to look at, or None and why (a missing install is reported, not refused; a
    bad --sglang-root or a damaged tree is still an error: the user asked for that tree)."""
    from ..runtime.sglang_env import locate

    if sglang_root is None and importlib.util.find_spec("sglang") is None:
        return None, (f"not installed in this Python ({sys.executable}): install it here, or pass "
                      "--sglang-root PATH to read an unpacked release")
    return locate(sglang_root), None


def collect(sglang_root: str | None, quick: bool = False, recheck: bool = False) -> dict:
    env, missing = _locate(sglang_root)
    child = _start_import(env, quick, recheck)  # runs while the rest is read
    try:
        info: dict[str, Any] = {
            "tool_version": __version__,
            "python": sys.executable,
            "sglang": env.to_dict() if env else None,
            "sglang_missing": missing,
            "patch": _patch_summary(env) if env else None,
            "plugin": _plugin_summary(env) if env else None,
            "torch": _torch_info(),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
            "env_problems": env_problems(),
            "optional": {m: importlib.util.find_spec(m) is not None for m in ("transformers", "matplotlib")},
        }
    except BaseException:  # Ctrl-C or a bug while reading: the child goes too, at once
        if isinstance(child, subprocess.Popen):
            child.kill()
            child.wait()
        raise
    info_import = _finish_import(child)
    if isinstance(child, subprocess.Popen):
        _keep_import(_import_key(env), info_import)
    info["sglang_import"] = info_import
    info["can"] = capabilities(info)
    return info


# ------------------------------------------------------------------ what it means


def _gpu(info: dict) -> tuple[bool, str]:
    t = info["torch"]
    if t["available"] and t["cuda_available"] and t["gpu_count"]:
        return True, f"{t['gpu_count']} CUDA GPU(s), {t['gpu_name']}"
    if t["available"]:
        if not t["cuda"]:
            return False, f"no CUDA GPU (torch {t['version']} is built without CUDA)"
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        return False, "no CUDA GPU visible to torch" + (f" (CUDA_VISIBLE_DEVICES={vis!r})" if vis is not None else "")
    n = t.get("nvidia_smi_gpus")
    return False, (f"no usable GPU: torch does not import ({t['error']})"
                   + (f"; nvidia-smi lists {n} GPU(s)" if n else ""))


def capabilities(info: dict) -> list[dict]:
    """One entry per kind of work: {what, commands, ok, why}."""
    s = info["sglang"]
    imp = info["sglang_import"]
    gpu_ok, gpu_why = _gpu(info)
    can: list[dict] = []

    def add(what: str, commands: str, ok: bool, why: str) -> None:
        can.append({"what": what, "commands": commands, "ok": ok, "why": why})

    add("measure a running server", "bench, compare", True,
        "HTTP only: any SGLang (or OpenAI-compatible) server this machine can reach")
    plots = "" if info["optional"]["matplotlib"] else "; plots need matplotlib (pip install 'sglang-eagle3-ext[plot]')"
    add("read results", "profile, compare, sweep --report, calibrate, adaptive write, report", True,
        "files only" + plots)
    where = f"SGLang {s['version']}'s sources" if s else None
    add("check the draft's layer wiring", "layers check", bool(s),
        f"reads {where}" if s else "needs SGLang's sources: " + (info["sglang_missing"] or "not found"))
    if s:
        skip = "" if imp["ok"] else "; SGLang's own argument check is skipped (its server does not import here)"
        if imp["ok"] is None:
            skip = "; SGLang's own argument check runs if its server imports (not tried)"
        add("plan servers (nothing started)", "launch / scan / sweep / demo --dry-run, patch apply --dry-run",
            True, f"our release rules for SGLang {s['version']}{skip}")
    else:
        add("plan servers (nothing started)", "launch / scan / sweep / demo --dry-run", False,
            "needs SGLang's sources (or --sglang-root PATH)")
    why_not = []
    if not s:
        why_not.append("no SGLang")
    elif imp["ok"] is False:
        why_not.append(f"SGLang's server does not import ({imp['why']})")
    if not gpu_ok:
        why_not.append(gpu_why)
    if why_not:
        start_ok, start_why = False, "; ".join(why_not)
    elif imp["ok"] is None:
        start_ok, start_why = True, f"{gpu_why}; SGLang's server import {imp['why']}"
    else:
        start_ok, start_why = True, f"{gpu_why}, SGLang {s['version']} imports"
    add("start EAGLE-3 servers", "launch, scan, sweep, demo", start_ok, start_why)
    if s:
        from ..runtime.sglang_env import parse_version

        adaptive = parse_version(s["version"]) >= parse_version("0.5.13") and s["has_plugins"]
        add("one-start scan and the throughput policy", "scan, launch --policy / --adaptive", adaptive and start_ok,
            ("SGLang 0.5.13+ adaptive step states and the plugin route" if adaptive else
             f"SGLang {s['version']} has no adaptive step states (0.5.13+): use sweep (one server per config)")
            + ("" if start_ok or not adaptive else "; but no server can start here (above)"))
    tiny_ok = info["torch"]["available"] and info["optional"]["transformers"]
    add("build the tiny models", "tiny, traffic", bool(tiny_ok),
        ("torch and transformers import; --shape llama3-8b / moe are built on a CUDA GPU"
         + ("" if gpu_ok else " (none here)")) if tiny_ok else "needs torch and transformers (pip install "
                                                               "'sglang-eagle3-ext[tiny]')")
    return can


def headline(info: dict) -> str:
    gpu_ok, gpu_why = _gpu(info)
    start = next(c for c in info["can"] if c["what"] == "start EAGLE-3 servers")
    if start["ok"]:
        return f"This machine can start EAGLE-3 servers ({start['why']})."
    no_gpu = not gpu_ok and info["torch"]["available"]  # torch says so; without torch we cannot tell
    lead = "No GPU here, so no server can start" if no_gpu else "No server can start here"
    return (f"{lead} ({start['why']}). What works: bench against a server elsewhere, reading results, "
            + ("layers check and --dry-run plans." if info["sglang"] else "nothing that needs SGLang's sources."))


# ------------------------------------------------------------------ printing


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
    if "error" in d:
        out.print(f"plugin: cannot tell ({d['error']})", markup=False)
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


def _print_sglang(info: dict) -> None:
    s = info["sglang"]
    if not s:
        out.print(f"SGLang: {info['sglang_missing']}", markup=False, highlight=False)
        return
    out.print(f"SGLang {s['version']} ({s['source']}) at {s['package_dir']}", markup=False, highlight=False)
    out.print(f"  eagle worker families: {', '.join(s['families']) or 'none found'}; EAGLE-3 decode runs on: "
              f"{s['decode_worker']}", markup=False, highlight=False)
    routes = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in s["routes"].items())
    out.print(f"  probe routes: {routes}; speculative registry (0.5.12+): "
              f"{'yes' if s['has_spec_registry'] else 'no'}", markup=False, highlight=False)
    imp = info["sglang_import"]
    word = {True: "yes", False: "NO", None: "?"}[imp["ok"]]
    kept = "; the last doctor's answer: nothing was installed or removed since (--recheck imports again)"
    out.print(f"  server imports in this Python: {word} ({imp['why']}{kept if imp.get('kept') else ''})",
              markup=False, highlight=False)


def _print_env(info: dict) -> None:
    problems = info["env_problems"]
    if not info["env"]:
        out.print("env in effect: no NCCL_*, EAGLE3_* or SGLANG_EAGLE3_* variables set")
        return
    out.print("env in effect:")
    for k, v in info["env"].items():
        out.print(f"  {k}={v}", markup=False, highlight=False)
    for k, why in problems.items():
        out.print(f"  [bold red]![/] {k}: ", end="", highlight=False)
        out.print(why, markup=False, highlight=False)


def run(args: argparse.Namespace) -> int:
    info = collect(args.sglang_root, quick=getattr(args, "quick", False), recheck=getattr(args, "recheck", False))
    if args.json:
        print_json(info)
        return 0
    out.print(f"[bold]sgl-eagle3 {info['tool_version']}[/] on Python {sys.version.split()[0]} ({info['python']})",
              highlight=False)
    _print_sglang(info)
    _print_patch(info["patch"])
    _print_plugin(info["plugin"])
    t = info["torch"]
    if t["available"]:
        gpus = f"{t['gpu_count']} GPU(s) {t['gpu_name'] or ''}".strip()
        out.print(f"torch {t['version']} (CUDA {t['cuda'] or 'none'}), {gpus}", markup=False, highlight=False)
    else:
        out.print(f"torch: not importable ({t['error']})", markup=False, highlight=False)
    _print_env(info)
    out.print("[bold]what this machine can do:[/]")
    for c in info["can"]:
        mark = "[green]yes[/]" if c["ok"] else "[red] no[/]"
        out.print(f"  {mark}  {c['what']} ({c['commands']}): ", end="", highlight=False)
        out.print(c["why"], markup=False, highlight=False)
    out.print(headline(info), markup=False, highlight=False)
    return 0
