"""NCCL environment presets: data in ``launch/nccl.yaml``, applied without overriding the user.

NCCL reads its ``NCCL_*`` variables once per process, when the first communicator is created, so a
preset only works when it is in ``os.environ`` before that: the plugin applies it first thing in
every SGLang scheduler process (``load_plugins()`` is the first statement of
``run_scheduler_process``), ``sgl-eagle3 launch`` puts it in the server's environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .resources import data_dir
from .safeparse import yaml_load
from .settings import NCCL

ENV = NCCL.name
# launch/nccl.yaml of the checkout, or the copy a wheel carries (resources.data_dir).
DEFAULT_FILE = data_dir("launch") / "nccl.yaml"
_NAME = re.compile(r"^NCCL_[A-Z0-9_]+$")

# NCCL variables SGLang itself writes (reference sglang-on-cpu.md section 3, SGLang 0.5.23;
# version map section 6 item 6 for older releases). A preset naming one of these interacts.
SGLANG_WRITES: dict[str, str] = {
    "NCCL_ALGO": "SGLang overwrites it with allreduce:tree under --enable-deterministic-inference "
                 "with TP > 1 (arg_groups/attention_hook.py, 0.5.23)",
    "NCCL_MIN_NCHANNELS": "overwritten under --enable-deterministic-inference",
    "NCCL_MAX_NCHANNELS": "overwritten under --enable-deterministic-inference",
    "NCCL_CUMEM_ENABLE": "set by SGLang at engine start (only if unset since 0.5.5; always with "
                         "--enable-symm-mem)",
    "NCCL_NVLS_ENABLE": "set by SGLang at engine start (a user value survives only without "
                        "--enable-nccl-nvls / --enable-symm-mem)",
    "NCCL_GRAPH_REGISTER": "SGLang sets 0 when TP/EP/DP > 1 with CUDA graphs (setdefault)",
    "NCCL_GRAPH_MIXING_SUPPORT": "SGLang sets 0 with --dcp-size > 1",
    "NCCL_MNNVL_ENABLE": "SGLang sets 1 on multi-node MNNVL fabrics (setdefault)",
}


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml_load(path.read_text(encoding="utf-8"), f"NCCL presets {path}")
    except OSError as exc:
        raise UserError(f"NCCL presets {path}: cannot read ({exc.strerror})", exit_code=2) from None
    except yaml.YAMLError as exc:
        raise UserError(f"NCCL presets {path}: not valid YAML ({str(exc).splitlines()[0]})", exit_code=2) from None
    if not isinstance(data, dict) or not isinstance(data.get("presets"), dict):
        raise UserError(f"NCCL presets {path}: expected a top-level 'presets:' mapping", exit_code=2)
    return data["presets"]


def _entries(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """name -> {"env": {...}, "why": str}, validated."""
    p = Path(path) if path is not None else DEFAULT_FILE
    raw = _read_yaml(p)
    out: dict[str, dict[str, Any]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("env", {}), dict):
            raise UserError(f"NCCL presets {p}: preset {name!r} needs an 'env:' mapping", exit_code=2)
        env: dict[str, str] = {}
        for var, value in (entry.get("env") or {}).items():
            if not isinstance(var, str) or not _NAME.match(var):
                raise UserError(f"NCCL presets {p}: preset {name!r}: {var!r} is not an NCCL_* variable name",
                                exit_code=2)
            if value is None or isinstance(value, (dict, list)):
                raise UserError(f"NCCL presets {p}: preset {name!r}: {var} needs a scalar value", exit_code=2)
            env[var] = str(value)
        out[str(name)] = {"env": env, "why": str(entry.get("why") or "").strip()}
    return out


def load_presets(path: str | Path | None = None) -> dict[str, dict[str, str]]:
    """Every preset: name -> {NCCL_VAR: value}. ``path`` defaults to launch/nccl.yaml."""
    return {name: e["env"] for name, e in _entries(path).items()}


def describe_presets(path: str | Path | None = None) -> dict[str, str]:
    """name -> the 'why' text of each preset (for docs and `launch --help`)."""
    return {name: e["why"] for name, e in _entries(path).items()}


def preset_env(name: str, path: str | Path | None = None) -> dict[str, str]:
    """The variables of one preset; UserError (exit 2) naming the known presets otherwise."""
    presets = load_presets(path)
    key = (name or "").strip()
    if key not in presets:
        raise UserError(f"unknown NCCL preset {name!r}; known: {', '.join(sorted(presets))}",
                        exit_code=2)
    return dict(presets[key])


def effective_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Every NCCL_* variable set in ``environ``, sorted by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith("NCCL_")}


@dataclass
class NcclReport:
    """What ``apply_preset`` did. ``kept``: var -> (the user's value, the preset's value)."""

    preset: str
    applied: dict[str, str] = field(default_factory=dict)
    already: dict[str, str] = field(default_factory=dict)  # set before, to the preset's value
    kept: dict[str, tuple[str, str]] = field(default_factory=dict)
    effective: dict[str, str] = field(default_factory=dict)
    interactions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "applied": dict(self.applied),
            "already": dict(self.already),
            "kept": {k: {"user": u, "preset": p} for k, (u, p) in self.kept.items()},
            "effective": dict(self.effective),
            "interactions": dict(self.interactions),
        }

    def lines(self) -> list[str]:
        """Human summary, one fact per line (the plugin logs these once per process)."""
        def fmt(d: dict[str, str]) -> str:
            return " ".join(f"{k}={v}" for k, v in d.items()) or "-"

        applied = fmt(self.applied) if self.applied else "nothing new"
        out = [f"NCCL preset {self.preset!r}: applied {applied}"]
        if self.already:
            out.append(f"  already set to the preset's value: {fmt(self.already)}")
        for var, (user, want) in self.kept.items():
            out.append(f"  kept {var}={user} (set before the preset; preset wants {want})")
        for var, note in self.interactions.items():
            out.append(f"  note {var}: {note}")
        out.append(f"  effective NCCL env: {fmt(self.effective)}")
        return out


def apply_preset(name: str, environ: MutableMapping[str, str] | None = None,
                 path: str | Path | None = None) -> NcclReport:
    """Put preset ``name`` into ``environ`` (default ``os.environ``) without overriding anything
    already set; report what was applied, what was kept and the effective NCCL env."""
    env = os.environ if environ is None else environ
    wanted = preset_env(name, path)
    report = NcclReport(preset=name.strip())
    for var, value in wanted.items():
        current = env.get(var)
        if current is None or current == "":
            env[var] = value
            report.applied[var] = value
        elif current == value:
            report.already[var] = value
        else:
            report.kept[var] = (current, value)
        if var in SGLANG_WRITES:
            report.interactions[var] = SGLANG_WRITES[var]
    report.effective = effective_env(env)
    return report
