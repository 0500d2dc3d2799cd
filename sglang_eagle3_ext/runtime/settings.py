"""Every environment variable this package reads or writes: one typed declaration each, with its
default and meaning (in the manner of SGLang's ``srt/environ.py`` ``envs``), parsed in one place.

Stdlib only, no import of our other modules: the probes, the plugin and the aux-layer override
import this inside SGLang processes. A bad value never raises there: ``get`` falls back to the
default and ``read`` says why (the CLI turns that into one error line).

Prefixes: ``SGLANG_EAGLE3_*`` for our switches and paths, ``EAGLE3_PROFILE*`` for the probes.
Never ``SGL_*``: SGLang (0.5.23 ``srt/environ.py`` ``_handle_deprecated_envs``) treats that
prefix as its own deprecated spelling, warns "Environment variable SGL_... is deprecated" in
every process and copies it to ``SGLANG_...``. The old ``SGL_EAGLE3_*`` names are still read once,
with a deprecation note (``adopt_old_names``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FALSE = ("", "0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


def _bool(raw: str) -> bool:
    """Only the usual words: anything else (``garbage``, ``disable``) is a bad value, so the
    default applies (probes stay off) and ``read`` says why, instead of counting as "on"."""
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError("is not 1/0, true/false, yes/no or on/off")


# Parsers: a ValueError's message is a predicate ("is not ...") that follows "NAME='raw' ".

def _pos_int(raw: str) -> int:
    try:
        v = int(raw.strip())
    except ValueError:
        v = 0
    if v < 1:
        raise ValueError("is not a positive integer")
    return v


def _float(raw: str) -> float:
    try:
        v = float(raw.strip())
    except ValueError:
        v = -1.0
    if v != v or v < 0:  # NaN or negative
        raise ValueError("is not a number >= 0")
    return v


def _pos_float(raw: str) -> float:
    try:
        v = float(raw.strip())
    except ValueError:
        v = 0.0
    if not 0 < v < float("inf"):  # also rejects NaN
        raise ValueError("is not a positive number")
    return v


PROFILE_MODES = ("auto", "events", "wall", "sync")  # auto: events on CUDA, else wall


def _profile_mode(raw: str) -> str:
    v = raw.strip().lower()
    if v not in PROFILE_MODES:
        raise ValueError(f"is not one of {', '.join(PROFILE_MODES)}")
    return v


def _spec(raw: str) -> dict[str, int | None]:
    """"steps,topk,draft_tokens"; an empty or "?" part is unknown."""
    bad = ValueError("is not 'steps,topk,draft_tokens'")
    try:
        parts = [int(x) if x.strip() not in ("", "?") else None for x in raw.split(",")]
    except ValueError:
        raise bad from None
    if len(parts) != 3:
        raise bad
    return dict(zip(("steps", "topk", "draft_tokens"), parts, strict=True))


def _signal(raw: str) -> str:
    name = raw.strip().upper()
    name = name if name.startswith("SIG") else "SIG" + name
    if name not in ("SIGUSR1", "SIGUSR2"):
        raise ValueError("is not SIGUSR1 or SIGUSR2")
    return name


def _steps_list(raw: str) -> tuple[int | str, ...]:
    """"4,2,0,5x4x21": distinct states in the order given: step counts >= 0 (chains) and tree
    labels STEPSxTOPKxTOKENS (specstate.py)."""
    from .specstate import parse

    vals: list[int | str] = []
    for x in (p.strip() for p in raw.split(",")):
        if not x:
            continue
        if x.isdigit():
            vals.append(int(x))
            continue
        try:
            st = parse(x)
        except ValueError:
            raise ValueError("is not a comma list of distinct step counts >= 0 or trees "
                             "STEPSxTOPKxTOKENS") from None
        vals.append(st.key)
    if not vals or len(set(vals)) != len(vals):
        raise ValueError("is not a comma list of distinct step counts >= 0 or trees STEPSxTOPKxTOKENS")
    return tuple(vals)


def _trees(raw: str) -> str:
    """"5x4x21@1-16,4x3x8@1-4": trees held beside the chains (specstate.parse_trees)."""
    from .specstate import parse_trees

    try:
        specs = parse_trees(raw)
    except ValueError as exc:
        raise ValueError(f"is not a tree list ({exc})") from None
    if not specs:
        raise ValueError("names no tree")
    return raw.strip()


def _text(raw: str) -> str | None:
    return raw.strip() or None


def _path(raw: str) -> Path | None:
    if not raw.strip():
        return None
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # "~nouser/x": pathlib cannot find that user's home
        raise ValueError("names the home folder of an unknown user") from None


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    side: str  # who reads it: "cli" (our commands), "sglang" (inside SGLang processes), "both", "shell"
    old: str | None = None  # a former name, still honoured (with a note)

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        env = os.environ if environ is None else environ
        if self.name in env:
            return env[self.name]
        if self.old and self.old in env:
            _note_old(self)
            return env[self.old]
        return None

    def read(self, environ: Mapping[str, str] | None = None) -> tuple[Any, str | None]:
        """(value, problem): the parsed value, or the default and why the value was not usable."""
        raw = self.raw(environ)
        if raw is None or not raw.strip():
            return self.default, None
        try:
            value = self.parse(raw)
        except ValueError as exc:
            fallback = f"using {self.default!r}" if self.default is not None else "ignored"
            return self.default, f"{self.name}={raw!r} {exc}; {fallback}"
        return (self.default if value is None else value), None

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        return self.read(environ)[0]

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        raw = self.raw(environ)
        return raw is not None and bool(raw.strip())


_noted: set[str] = set()


def _note_old(s: Setting) -> None:
    if s.old and s.old not in _noted:
        _noted.add(s.old)
        print(f"sglang-eagle3-ext: {s.old} is deprecated (SGLang rewrites every SGL_* variable and warns "
              f"about it); use {s.name}", file=sys.stderr)


# --- ours, read by the CLI ------------------------------------------------------------------
CACHE = Setting("SGLANG_EAGLE3_CACHE", _path, None, "cache folder for release sources, run state and pid "
                "files (default ~/.cache/sglang-eagle3-ext)", "cli", old="SGL_EAGLE3_CACHE")
PRESETS = Setting("SGLANG_EAGLE3_PRESETS", _path, None, "extra folder of launch presets, searched before "
                  "the repository's launch/", "cli", old="SGL_EAGLE3_PRESETS")
TINY = Setting("SGLANG_EAGLE3_TINY", _path, None, "folder of the tiny models (`sgl-eagle3 tiny --out`), "
               "expanded in launch/tiny*.yaml as ${SGLANG_EAGLE3_TINY:-./tiny-models}", "cli",
               old="SGL_EAGLE3_TINY")
VENV = Setting("SGLANG_EAGLE3_VENV", _text, ".venv", "virtual environment tools/ci_env.sh builds", "shell",
               old="SGL_EAGLE3_VENV")
LLAMA3_8B = Setting("SGLANG_EAGLE3_LLAMA3_8B", _path, None, "folder of a `tiny --shape llama3-8b` build, "
                    "expanded in launch/llama3-8b.yaml", "cli")
MOE = Setting("SGLANG_EAGLE3_MOE", _path, None, "folder of a `tiny --shape moe` build, expanded in "
              "launch/moe.yaml", "cli")
DRAFT = Setting("SGLANG_EAGLE3_DRAFT", _text, None, "draft folder name inside a shape build (e.g. "
                "draft-0.8 of an acceptance list), expanded in the shape presets", "cli")
PROFILE_METRICS = Setting("EAGLE3_PROFILE_METRICS", _bool, False, "publish each window on SGLang's "
                          "/metrics (docs/guide/metrics.md)", "sglang")
PROFILE_BASELINE_TPS = Setting("EAGLE3_PROFILE_BASELINE_TPS", _pos_float, None, "baseline tok/s for the "
                               "break-even margin gauge (docs/guide/metrics.md)", "sglang")
DEBUG = Setting("SGLANG_EAGLE3_DEBUG", _bool, False, "show the traceback of an unexpected error instead "
                "of the one-line report", "cli")
# --- ours, written by `launch` and read inside SGLang processes --------------------------------
AUX_LAYERS = Setting("SGLANG_EAGLE3_AUX_LAYERS", _text, None, "aux hidden-state layers, our convention "
                     "(output of decoder layer k; emb), e.g. 2,30,58; parsed by layers.parse_layers",
                     "sglang")
NCCL = Setting("SGLANG_EAGLE3_NCCL", _text, None, "NCCL preset name from launch/nccl.yaml, applied by the "
               "plugin in every process", "sglang")
# --- step control inside SGLang (stepctl.py; the plugin installs a decider, docs/reference/plugin.md) ---------
HOLD = Setting("SGLANG_EAGLE3_HOLD", _pos_int, None, "hold schedule: mean cycles per block (each "
               "N/2..3N/2); the adaptive controller holds each candidate step count in turn "
               "(0.5.13+, `scan`)", "sglang")
HOLD_STEPS = Setting("SGLANG_EAGLE3_HOLD_STEPS", _steps_list, None, "states (step counts, trees "
                     "5x4x21) the hold schedule holds, each once a round in an order shuffled per level and round (default: the "
                     "controller's candidates)",
                     "sglang")
TREES = Setting("SGLANG_EAGLE3_TREES", _trees, None, "trees held beside the adaptive chains in one "
                "server, STEPSxTOPKxTOKENS@BS-BS (e.g. 5x4x21@1-16,4x3x8@1-4); built by the plugin "
                "(0.5.16 / 0.5.23, page size 1; `launch --trees`, `scan --trees`)", "sglang")
POLICY = Setting("SGLANG_EAGLE3_POLICY", _path, None, "scan result file (eagle3_scan/1) driving the "
                 "throughput policy decider; refused together with SGLANG_EAGLE3_HOLD", "sglang")
# --- the probes (probes/__init__.py settings() reads these through get/read, nothing by hand)
PROFILE = Setting("EAGLE3_PROFILE", _bool, False, "probes on (1) / off", "sglang")
PROFILE_EVERY = Setting("EAGLE3_PROFILE_EVERY", _pos_int, 100, "cycles per window", "sglang")
PROFILE_MODE = Setting("EAGLE3_PROFILE_MODE", _profile_mode, "auto", "auto / events / wall / sync (auto: "
                       "events on CUDA, else wall)", "sglang")
PROFILE_OUT = Setting("EAGLE3_PROFILE_OUT", _text, None, "JSONL path; rank 0 appends one record per "
                      "window", "sglang")
PROFILE_SPEC = Setting("EAGLE3_PROFILE_SPEC", _spec, None, "steps,topk,draft_tokens (set by launch)",
                       "sglang")
PROFILE_ROUTE = Setting("EAGLE3_PROFILE_ROUTE", _text, None, "source-patch / plugin, recorded per window",
                        "sglang")
PROFILE_IDLE_MS = Setting("EAGLE3_PROFILE_IDLE_MS", _float, 200.0, "a gap longer than this ends a cycle "
                          "at its own end", "sglang")
PROFILE_DEFER = Setting("EAGLE3_PROFILE_DEFER", _bool, True, "events mode: read each window once the GPU "
                        "has passed it (0: at its boundary)", "sglang")
PROFILE_TOGGLE = Setting("EAGLE3_PROFILE_TOGGLE", _signal, None, "SIGUSR1 / SIGUSR2 pauses and resumes the "
                         "probes of a live process", "sglang")
PROFILE_TRACE = Setting("EAGLE3_PROFILE_TRACE", _bool, False, "tests only: every probe call is appended "
                        "to probes.trace", "sglang")

ALL: tuple[Setting, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))
BY_NAME: dict[str, Setting] = {s.name: s for s in ALL}
PREFIXES = ("SGLANG_EAGLE3_", "EAGLE3_PROFILE", "SGL_EAGLE3_")  # what `doctor` shows


def adopt_old_names(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """Copy each set old ``SGL_EAGLE3_*`` name to its new name when that is unset (so presets that
    expand ``${SGLANG_EAGLE3_TINY}`` and child processes see it), with one note each. Returns the
    old names adopted."""
    env = os.environ if environ is None else environ
    adopted = []
    for s in ALL:
        if s.old and s.old in env:
            if s.name not in env:
                env[s.name] = env[s.old]
                _note_old(s)
                adopted.append(s.old)
            del env[s.old]  # so the SGLang processes we start do not warn about it again
    return adopted


def table() -> str:
    """Markdown table of every variable (docs/reference/architecture.md embeds this text)."""
    rows = ["| variable | default | read by | meaning |", "|---|---|---|---|"]
    for s in ALL:
        old = f" (was `{s.old}`)" if s.old else ""
        rows.append(f"| `{s.name}`{old} | {s.default if s.default is not None else 'unset'} | {s.side} | "
                    f"{s.doc} |")
    return "\n".join(rows)
