"""What a release offers, read from its source without importing it: the server flags it knows, the EAGLE-3 target architectures it has."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from ..runtime.errors import UserError
from ..runtime.safeparse import CONFIG_LIMIT, json_loads, read_text
from ..runtime.sglang_env import SGLangEnv

_FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*$")

# --------------------------------------------------------------------------------------------
# What a release offers, read from its source (no import)
# --------------------------------------------------------------------------------------------

def _is_A_annotation(node: ast.expr) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "A"


def _no_cli(node: ast.expr) -> bool:
    return any(
        isinstance(kw, ast.keyword) and kw.arg == "no_cli" and isinstance(kw.value, ast.Constant)
        and kw.value.value is True
        for call in ast.walk(node) if isinstance(call, ast.Call) for kw in call.keywords
    )


@lru_cache(maxsize=16)
def _known_flags(package_dir: str) -> frozenset[str]:
    srt = Path(package_dir) / "srt"
    files = [srt / "server_args.py", *sorted((srt / "arg_groups").rglob("*.py"))]
    flags: set[str] = set()
    for f in files:
        if not f.is_file():
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
        for node in ast.walk(tree):
            # argparse names and Arg(aliases=[...], cli_name=...) strings (<= 0.5.15 and later).
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _FLAG_RE.match(node.value):
                flags.add(node.value)
            # `field: A[T, ...]` becomes `--field` (0.5.14+ server_args.py; 0.5.20+
            # arg_groups/fields/*.py; 0.5.23 arg_groups/arg_utils.py:288-330), unless no_cli=True.
            elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                  and _is_A_annotation(node.annotation) and not _no_cli(node.annotation)):
                flags.add("--" + node.target.id.replace("_", "-"))
    return frozenset(flags)


def known_flags(env: SGLangEnv) -> frozenset[str]:
    """Every `--flag` that `python -m sglang.launch_server` of this release accepts."""
    return _known_flags(str(env.package_dir))


@lru_cache(maxsize=16)
def _eagle3_archs(package_dir: str) -> frozenset[str]:
    names: set[str] = set()
    for f in sorted((Path(package_dir) / "srt" / "models").glob("*.py")):
        text = f.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"^EntryClass\s*=\s*\[?([^\]\n]*)", text, re.M):
            names.update(n.strip() for n in m.group(1).split(",") if "Eagle3" in n)
    return frozenset(n for n in names if n)


def eagle3_archs(env: SGLangEnv) -> frozenset[str]:
    """EAGLE-3 draft architectures this release can load (its models/*.py EntryClass names)."""
    return _eagle3_archs(str(env.package_dir))


def read_architecture(path: str | Path, what: str, instead: str | None = None) -> str:
    """architectures[0] of a model folder's config.json; UserError(2) when it isn't there.
    ``instead``: the other way to give the path, for the hint when a preset variable made it
    (default: "give WHAT PATH")."""
    from .launch_config import path_hint

    hint = path_hint(path, instead or f"give {what} PATH")
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{what} {p}: no such folder (local paths only; nothing is downloaded){hint}", 2)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"{what} {p}: no config.json inside (is this a model folder?){hint}", 2)
    try:
        cfg = json_loads(read_text(cfg_file, what="a model config", limit=CONFIG_LIMIT), strict=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"{what} {cfg_file}: cannot read it as JSON ({exc})", 2) from exc
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not archs or not isinstance(archs, list):
        raise UserError(f"{what} {cfg_file}: no 'architectures' list", 2)
    return str(archs[0])
