"""What one launch is: the ``LaunchConfig`` dataclass, its field metadata, and preset reading/merging.

Pure configuration: the standard library, PyYAML and our stdlib-only ``errors`` / ``resources`` /
``settings``; no subprocess, no socket, and neither ``flags`` (the rules) nor ``server`` (the
process). Each field carries its CLI option once (``metadata["cli"]``); ``commands/launch.py``
builds its options from that, preset keys are the field names, and the preset type checks come
from the annotations, so a new setting is added in one place.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..runtime.errors import UserError
from ..runtime.resources import data_dir
from ..runtime.safeparse import yaml_file

REPO_LAUNCH_DIR = data_dir("launch")
DEFAULT_PORT = 30000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 1800.0  # a Kimi-K2.5 load took ~15 minutes in the seeds

# The CLI option groups of `sgl-eagle3 launch`, in help order.
GROUP_SPEC = "model and speculation"
GROUP_ENV = "environment and profiling"
GROUP_PROCESS = "process"
GROUPS = (GROUP_SPEC, GROUP_ENV, GROUP_PROCESS)


def _opt(default: Any = None, *, cli: str | None = None, group: str = GROUP_PROCESS, help: str = "",
         metavar: str | None = None, expand: bool = False, negate: bool = False, hidden: bool = False,
         default_factory: Any = None) -> Any:
    """A LaunchConfig field with its metadata.

    ``cli``: the launch option (none: preset-only key); ``negate``: a store-true option that sets
    the (bool) field to False (``--no-sglang-check``); ``hidden``: accepted, not in ``--help``;
    ``expand``: ``${VAR}`` and ``~`` are expanded in preset values (machine-local paths).
    """
    meta = {"cli": cli, "group": group, "help": help, "metavar": metavar, "expand": expand,
            "negate": negate, "hidden": hidden}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class LaunchConfig:
    """Everything one launch needs. Preset YAML keys are these field names (``-`` or ``_``)."""

    model: str | None = _opt(cli="--model", group=GROUP_SPEC, metavar="PATH", expand=True,
                             help="target model folder (holds config.json)")
    draft: str | None = _opt(cli="--draft", group=GROUP_SPEC, metavar="PATH", expand=True,
                             help="draft model folder (EAGLE-3 draft for EAGLE3)")
    algorithm: str | None = _opt(cli="--algorithm", group=GROUP_SPEC, metavar="ALGO",
                                 help="EAGLE3 (default) or EAGLE (NEXTN = EAGLE)")
    steps: int | None = _opt(cli="--steps", group=GROUP_SPEC, help="--speculative-num-steps")
    topk: int | None = _opt(cli="--topk", group=GROUP_SPEC, help="--speculative-eagle-topk")
    draft_tokens: int | None = _opt(cli="--draft-tokens", group=GROUP_SPEC,
                                    help="--speculative-num-draft-tokens")
    adaptive: str | None = _opt(  # SGLang adaptive config JSON -> --speculative-adaptive
        cli="--adaptive", group=GROUP_SPEC, metavar="FILE", expand=True,
        help="SGLang adaptive speculation (0.5.12+, topk 1) with this tier config "
             "(sgl-eagle3 adaptive write); --steps/--draft-tokens are set from it")
    policy: str | None = _opt(  # scan result -> adaptive + the throughput policy (policy_launch.py)
        cli="--policy", group=GROUP_SPEC, metavar="SCAN_RESULT", expand=True,
        help="SGLang adaptive speculation (0.5.13+) with the throughput policy choosing the step count "
             "from this scan's cycle costs (sgl-eagle3 scan); not with --adaptive")
    policy_within: int | None = _opt(  # which step counts --policy builds states for (policy_launch.py)
        cli="--policy-within", group=GROUP_SPEC, metavar="PCT",
        help="--policy builds adaptive states only for the step counts whose table tok/s is within "
             "PCT %% of the best at some batch size (default 5, the scan's --within; 100 = every "
             "candidate)")
    hold: int | None = _opt(  # the hold schedule as this server's decider (serve/trees_launch.py apply_hold)
        cli="--hold", group=GROUP_SPEC, metavar="N",
        help="hold every adaptive state (the --adaptive chains, then the --trees) in turn for blocks of "
             "about N decode cycles, a fixed schedule (SGLANG_EAGLE3_HOLD; SGLang 0.5.13+): for "
             "token-identity checks and measurements; not with --policy")
    trees: str | None = _opt(  # trees held beside the adaptive chains (serve/trees_launch.py)
        cli="--trees", group=GROUP_SPEC, metavar="SPEC",
        help="hold trees beside the adaptive chains in one server (SGLang 0.5.16 / 0.5.23 structure, "
             "page size 1): STEPSxTOPKxTOKENS@BS-BS, e.g. 5x4x21@1-16,3x4x8@1-4; needs --policy (or "
             "the scan's hold schedule)")
    no_spec: bool = _opt(False, cli="--no-spec", group=GROUP_SPEC, help="plain decoding (a baseline)")
    tp: int | None = _opt(cli="--tp", group=GROUP_SPEC, help="tensor parallel size")
    nccl: str | None = _opt(cli="--nccl", group=GROUP_ENV, metavar="PRESET",
                            help="NCCL preset from launch/nccl.yaml, or none")
    profile: bool = _opt(False, cli="--profile", group=GROUP_ENV, help="EAGLE3_PROFILE=1 (probes on)")
    profile_every: int | None = _opt(cli="--profile-every", group=GROUP_ENV, metavar="N",
                                     help="cycles per profile window")
    profile_mode: str | None = _opt(cli="--profile-mode", group=GROUP_ENV, metavar="MODE",
                                    help="events | wall | sync")
    profile_out: str | None = _opt(cli="--profile-out", group=GROUP_ENV, metavar="FILE", expand=True,
                                   help="JSONL file for window records")
    aux_layers: str | None = _opt(  # "2,30,58": outputs of decoder layers (0-based), or emb
        cli="--aux-layers", group=GROUP_SPEC, metavar="LAYERS",
        help="target layers feeding the EAGLE-3 draft: outputs of decoder layers, 0-based "
             "(e.g. 2,30,58; 'emb' = embedding) -> SGLANG_EAGLE3_AUX_LAYERS")
    trained_on: str | None = _opt(  # checked against the capture before start (serve/capture_line.py)
        cli="--trained-on", group=GROUP_SPEC, metavar="LAYERS",
        help="layers the draft was trained on, our convention (e.g. 2,30,58): launch refuses "
             "when the target would capture others")
    host: str = _opt(DEFAULT_HOST, cli="--host", help=f"HTTP host (default {DEFAULT_HOST})")
    port: int = _opt(DEFAULT_PORT, cli="--port", help=f"HTTP port (default {DEFAULT_PORT})")
    log: str | None = _opt(cli="--log", metavar="FILE", expand=True,
                           help="server log file (default ./sgl-eagle3-logs/...)")
    timeout: float | None = _opt(cli="--timeout", metavar="S",
                                 help=f"seconds to wait for health (default {DEFAULT_TIMEOUT:.0f})")
    extra_args: list[str] = _opt(default_factory=list)  # preset-only; on the CLI: after `--`
    env: dict[str, str] = _opt(default_factory=dict)    # preset-only
    # beyond the architecture contract (all optional):
    name: str | None = _opt()             # preset name, for logs and pid files
    description: str | None = _opt()
    nnodes: int = _opt(1, cli="--nnodes", help="multi-node: print the command for every node")
    dist_init_addr: str | None = _opt(cli="--dist-init-addr", metavar="HOST:PORT",
                                      help="node 0's address (multi-node)")
    python: str | None = _opt(cli="--python", metavar="EXE", expand=True,  # interpreter running SGLang
                              help="Python that runs SGLang (default: this one)")
    server_module: str = _opt("sglang.launch_server", cli="--server-module", hidden=True)  # stand-ins
    sglang_check: bool | None = _opt(  # False: skip SGLang's own argument check
        cli="--no-sglang-check", negate=True,
        help="skip SGLang's own argument resolution/check (a child Python, ~10 s)")

    def spec_string(self) -> str | None:
        if self.no_spec or self.steps is None:
            return None
        return f"{self.steps},{self.topk},{self.draft_tokens}"

    @property
    def url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


FIELDS = {f.name: f for f in dataclasses.fields(LaunchConfig)}


def value_kind(f: dataclasses.Field) -> str:
    """The preset value type of a field, from its annotation: int, bool, float, str, list or dict."""
    base = str(f.type).replace(" | None", "").strip()
    return {"list[str]": "list", "dict[str, str]": "dict"}.get(base, base)


_INT_KEYS = tuple(k for k, f in FIELDS.items() if value_kind(f) == "int")
_BOOL_KEYS = tuple(k for k, f in FIELDS.items() if value_kind(f) == "bool")
_STR_KEYS = tuple(k for k, f in FIELDS.items() if value_kind(f) == "str")
_EXPAND_KEYS = frozenset(k for k, f in FIELDS.items() if f.metadata.get("expand"))
CLI_FIELDS = tuple(f for f in FIELDS.values() if f.metadata.get("cli"))
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def cli_dest(f: dataclasses.Field) -> str:
    """The argparse attribute a field's option fills (``--no-sglang-check`` -> no_sglang_check)."""
    return str(f.metadata["cli"]).lstrip("-").replace("-", "_")


def cli_values(ns: Any) -> dict[str, Any]:
    """field -> value for ``override`` from parsed launch options (``None``: not given)."""
    values: dict[str, Any] = {}
    for f in CLI_FIELDS:
        v = getattr(ns, cli_dest(f), None)
        if f.metadata.get("negate"):
            v = False if v else None
        values[f.name] = v
    return values


# an expanded preset value -> (the variable it came from, whether that variable was set), so that a
# path which turns out missing can name the variable to set (path_hint)
_FROM_VAR: dict[str, tuple[str, bool]] = {}


def expand(value: str) -> str:
    """``${VAR}`` / ``${VAR:-default}`` and a leading ``~`` (presets name machine-local paths)."""
    used: list[tuple[str, bool]] = []

    def sub(m: re.Match[str]) -> str:
        v = os.environ.get(m.group(1))
        if v:
            used.append((m.group(1), True))
            return v
        if m.group(2) is not None:
            used.append((m.group(1), False))
            return m.group(2)
        raise UserError(f"preset value {value!r} needs ${m.group(1)} set (or a ${{VAR:-default}})", 2)

    out = os.path.expanduser(_VAR_RE.sub(sub, value))
    if used:
        _FROM_VAR[out] = used[0]
    return out


def path_hint(value: str | os.PathLike[str] | None, instead: str) -> str:
    """For an error about a path: which preset variable made it and what to do ("" if none did);
    ``instead`` is the other way to give it ("give --model PATH")."""
    got = _FROM_VAR.get(str(value)) if value is not None else None
    if got is None:
        return ""
    var, was_set = got
    if was_set:
        return f"; it comes from ${var}: point {var} at the folder, or {instead}"
    return (f"; it is the preset's default, used because {var} is not set: "
            f"export {var}=/path/to/the/folder, or {instead}")


def preset_dirs() -> list[Path]:
    dirs = []
    from ..runtime.settings import PRESETS

    if PRESETS.get():
        dirs.append(PRESETS.get())
    dirs.append(REPO_LAUNCH_DIR)
    return dirs


def list_presets() -> dict[str, Path]:
    """name -> file of every launch preset (``nccl.yaml`` is NCCL's own and not a launch preset)."""
    found: dict[str, Path] = {}
    for d in reversed(preset_dirs()):
        for f in sorted(d.glob("*.yaml")):
            if f.name != "nccl.yaml":
                found[f.stem] = f
    return found


def find_preset(path_or_name: str) -> Path:
    """The file a preset name or path reads (``$SGLANG_EAGLE3_PRESETS`` first, then launch/)."""
    p = Path(path_or_name).expanduser()
    if p.is_file():
        return p
    if p.suffix in (".yaml", ".yml") or os.sep in path_or_name:
        raise UserError(f"preset file {p}: not found", 2)
    presets = list_presets()
    if path_or_name in presets:
        return presets[path_or_name]
    raise UserError(f"unknown preset {path_or_name!r}; known: {', '.join(sorted(presets)) or 'none'} "
                    f"(or give a .yaml path)", 2)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(env: dict[str, str], origin: str) -> None:
    """Env additions a process can really receive: a name of letters, digits and _ (never ``=``,
    a space or a shell word) and a value without a NUL byte. Checked before anything is created."""
    for k, v in env.items():
        if not _ENV_NAME.fullmatch(str(k)):
            raise UserError(f"{origin}: {str(k)!r} is not a valid environment variable name "
                            "(letters, digits and _, not starting with a digit)", 2)
        if "\0" in str(v):
            raise UserError(f"{origin}: the value of {k} holds a NUL byte", 2)


def config_from_mapping(data: dict[str, Any], origin: str = "preset") -> LaunchConfig:
    """A LaunchConfig from preset-style keys; UserError(2) for unknown keys or wrong types."""
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key not in FIELDS:
            raise UserError(f"{origin}: unknown key {raw_key!r}; known keys: {', '.join(sorted(FIELDS))}", 2)
        if value is None:
            continue
        if key in ("aux_layers", "trained_on") and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if key in _INT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"{origin}: {raw_key} must be an integer, got {value!r}", 2)
        elif key in _BOOL_KEYS:
            if not isinstance(value, bool):
                raise UserError(f"{origin}: {raw_key} must be true or false, got {value!r}", 2)
        elif key == "timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"{origin}: timeout must be seconds, got {value!r}", 2)
            value = float(value)
            if not 0 < value < float("inf"):  # .nan / .inf in YAML: refused here, not waited on
                raise UserError(f"{origin}: timeout must be a finite number of seconds > 0, got {value!r}", 2)
        elif key == "extra_args":
            if isinstance(value, str):
                value = value.split()
            if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
                raise UserError(f"{origin}: extra_args must be a list of strings", 2)
            value = [expand(str(v)) for v in value]
        elif key == "env":
            if not isinstance(value, dict):
                raise UserError(f"{origin}: env must be a mapping NAME: value", 2)
            value = {str(k): expand(str(v)) for k, v in value.items()}
            check_env_names(value, f"{origin}: env")
        elif key in _STR_KEYS:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise UserError(f"{origin}: {raw_key} must be a string, got {value!r}", 2)
            value = expand(str(value)) if key in _EXPAND_KEYS else str(value)
        kwargs[key] = value
    return LaunchConfig(**kwargs)


def load_preset(path_or_name: str) -> LaunchConfig:
    """Read ``launch/<name>.yaml`` (or any YAML file); UserError(2) if malformed or unknown keys."""
    path = find_preset(path_or_name)
    try:
        data = yaml_file(path, f"preset {path}")  # bounded: a regular file of at most 4 MiB (safeparse)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"preset {path}{where}: malformed YAML ({problem})", 2) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"preset {path}: expected a mapping of keys, got {type(data).__name__}", 2)
    cfg = config_from_mapping(data, origin=f"preset {path}")
    if cfg.name is None:
        cfg.name = path.stem
    return cfg


def override(cfg: LaunchConfig, **values: Any) -> LaunchConfig:
    """CLI values win over preset values; ``None`` means "not given"."""
    changes = {k: v for k, v in values.items() if v is not None}
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise UserError(f"unknown launch setting(s): {', '.join(sorted(unknown))}", 2)
    if changes.get("no_spec"):
        # --no-spec on top of a speculative preset drops the preset's spec values.
        for k in ("draft", "steps", "topk", "draft_tokens", "algorithm"):
            if k not in changes:
                changes[k] = None
    elif any(k in changes for k in ("steps", "topk", "draft_tokens", "draft")) and "no_spec" not in changes:
        changes["no_spec"] = False
    if changes.get("adaptive") or changes.get("policy"):
        # --adaptive decides the start steps (flags.apply_adaptive); a preset's static spec values
        # (e.g. topk 4) would contradict it. Values given with --adaptive itself are kept.
        for k in ("steps", "topk", "draft_tokens"):
            changes.setdefault(k, None)
        changes.setdefault("no_spec", False)
    return dataclasses.replace(cfg, **changes)
