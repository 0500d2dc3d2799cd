"""SGLang's own resolution and checks of a launch, run in a child Python (8-16 s of imports; whatever SGLang writes to its environment stays in the child)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from ..runtime.errors import UserError
from ..runtime.sglang_env import SGLangEnv

# --------------------------------------------------------------------------------------------
# SGLang's own resolution + checks, in a child Python (8-16 s of imports; env writes stay there)
# --------------------------------------------------------------------------------------------

def importable_matches(env: SGLangEnv, python: str | None = None) -> bool:
    """True when ``python`` (default: this one) imports the same SGLang release as ``env``."""
    if python and Path(python).resolve() != Path(sys.executable).resolve():
        return False  # another interpreter: don't guess
    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return False
    return installed == env.version and importlib.util.find_spec("torch") is not None


# Runs in the child: parse with SGLang's parser, resolve, check; print one JSON line.
_CHECKER = r"""
import json, sys, traceback, io, contextlib
argvs = json.loads(sys.stdin.read())
def where(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "sglang" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    path = f.filename.split("site-packages/")[-1]
    return f"{path}:{f.lineno}: {(f.line or '').strip()}"
def attempt(args):
    from sglang.srt.server_args import prepare_server_args
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            sa = prepare_server_args(list(args))
    except SystemExit as exc:
        lines = [l for l in err.getvalue().splitlines() if "error:" in l]
        return {"ok": False, "type": "ArgumentError", "message": (lines[-1].split("error:", 1)[1].strip() if lines else f"argument parsing failed ({exc.code})"), "where": ""}
    except BaseException as exc:
        return {"ok": False, "type": type(exc).__name__, "message": str(exc), "where": where(exc)}
    try:
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        if hasattr(sa, "check_server_args"):
            sa.check_server_args()
    except BaseException as exc:
        return {"ok": False, "type": type(exc).__name__, "message": str(exc), "where": where(exc)}
    view = sa
    try:
        from sglang.srt.arg_groups.overrides import resolving_view
        view = resolving_view(sa)
    except Exception:
        pass
    keys = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens", "max_running_requests", "disable_overlap_schedule",
            "attention_backend", "device")
    return {"ok": True, "resolved": {k: getattr(view, k, None) for k in keys}}
for argv in argvs:
    res = attempt(argv)
    if not res["ok"] and "No accelerator" in res["message"] and "--device" not in argv:
        res = attempt(argv + ["--device", "cuda"])
        res["device_added"] = True
    print("EAGLE3_CHECK " + json.dumps(res, default=str), flush=True)
"""


def _server_args(argv: list[str]) -> list[str]:
    """What follows ``-m <module>`` in a launch argv (the argv itself if it has no ``-m``)."""
    return argv[argv.index("-m") + 2:] if "-m" in argv else list(argv)


def sglang_check_many(argvs: list[list[str]], *, env: dict[str, str] | None = None,
                      python: str | None = None, timeout: float = 300.0) -> list[dict]:
    """SGLang's ``prepare_server_args`` + ``resolve_once`` + ``check_server_args`` (whichever the
    release has) for each server argv, all in ONE child Python (imports cost 8-16 s).
    Each result: ``{"ok": bool, "type", "message", "where", "resolved", "device_added"}``."""
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("HF_HUB_OFFLINE", "1")  # a typo'd path must not cost a network timeout
    payload = json.dumps([_server_args(a) for a in argvs])
    try:
        proc = subprocess.run([python or sys.executable, "-c", _CHECKER], input=payload,
                              capture_output=True, text=True, env=child_env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"SGLang's own argument check did not finish in {timeout:.0f} s", 1) from exc
    results = [json.loads(ln[len("EAGLE3_CHECK "):]) for ln in proc.stdout.splitlines()
               if ln.startswith("EAGLE3_CHECK ")]
    if len(results) != len(argvs):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"SGLang's own argument check could not run (exit {proc.returncode}): {tail}", 1)
    return results


def check_message(res: dict) -> str:
    """One readable line for a failed SGLang check (bare asserts name the failing source line)."""
    msg = (res.get("message") or "").strip().replace("\n", " ")
    where = res.get("where") or ""
    if not msg:
        msg = f"failed at {where}" if where else "no message"
    elif where:
        msg = f"{msg} (at {where.split(': ', 1)[0]})"  # no [..]: rich would read it as markup
    return f"SGLang rejects these arguments: {res.get('type', 'Error')}: {msg}"


def run_sglang_checks(argv: list[str], *, env: dict[str, str] | None = None,
                      python: str | None = None, timeout: float = 300.0) -> list[str]:
    """SGLang's own checks for one launch argv; UserError(2) with one readable line on failure."""
    res = sglang_check_many([argv], env=env, python=python, timeout=timeout)[0]
    if not res["ok"] and res.get("type") in ("ModuleNotFoundError", "ImportError"):
        # a broken SGLang environment, not a bad argument: say so, and how to go on without it
        raise UserError(f"SGLang's own argument check could not import SGLang ({res.get('message')}); "
                        "fix that environment, or pass --no-sglang-check to rely on our checks alone", 1)
    if not res["ok"]:
        raise UserError(check_message(res), 2)
    notes = []
    if res.get("device_added"):
        notes.append("SGLang's own checks ran with --device cuda added (no accelerator on this machine)")
    r = res.get("resolved") or {}
    if r:
        shown = ", ".join(f"{k}={v}" for k, v in r.items() if v is not None)
        notes.append(f"SGLang's own checks passed; it resolves: {shown}")
    return notes
