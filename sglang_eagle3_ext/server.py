"""Start, watch and stop one SGLang server: presets, argv/env building, process group, health wait.

The command line is always a list handed to ``subprocess.Popen`` (never a shell string); the server
runs in its own session/process group so one ``killpg`` reaches every SGLang child (tokenizer,
schedulers, detokenizer) and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError
from .resources import cache_root, data_dir
from .settings import (
    AUX_LAYERS,
    NCCL,
    PROFILE,
    PROFILE_EVERY,
    PROFILE_MODE,
    PROFILE_OUT,
    PROFILE_SPEC,
)

REPO_LAUNCH_DIR = data_dir("launch")
DEFAULT_PORT = 30000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 1800.0  # a Kimi-K2.5 load took ~15 minutes in the seeds
DEFAULT_GRACE = 15.0
TAIL_LINES = 40


def state_dir() -> Path:
    return cache_root() / "run"


# --------------------------------------------------------------------------------------------
# Config and presets
# --------------------------------------------------------------------------------------------

@dataclass
class LaunchConfig:
    """Everything one launch needs. Preset YAML keys are these field names (``-`` or ``_``)."""

    model: str | None = None
    draft: str | None = None
    algorithm: str | None = None          # EAGLE3 (default) | EAGLE | NEXTN
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    adaptive: str | None = None           # SGLang adaptive config JSON -> --speculative-adaptive
    no_spec: bool = False
    tp: int | None = None
    nccl: str | None = None               # preset name from launch/nccl.yaml, or "none"
    profile: bool = False
    profile_every: int | None = None
    profile_mode: str | None = None
    profile_out: str | None = None
    aux_layers: str | None = None         # "2,30,58": outputs of decoder layers (0-based), or emb
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    log: str | None = None
    timeout: float | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # beyond the architecture contract (all optional):
    name: str | None = None               # preset name, for logs and pid files
    description: str | None = None
    nnodes: int = 1
    dist_init_addr: str | None = None
    python: str | None = None             # interpreter that runs SGLang (default: this one)
    server_module: str = "sglang.launch_server"  # tests point this at stand-in servers
    sglang_check: bool | None = None      # False: skip SGLang's own argument check

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
_INT_KEYS = ("steps", "topk", "draft_tokens", "tp", "profile_every", "port", "nnodes")
_BOOL_KEYS = ("no_spec", "profile", "sglang_check")
_STR_KEYS = ("model", "draft", "adaptive", "algorithm", "nccl", "profile_mode", "profile_out", "aux_layers",
             "host", "log", "name", "description", "dist_init_addr", "python", "server_module")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(value: str) -> str:
    """``${VAR}`` / ``${VAR:-default}`` and a leading ``~`` (presets name machine-local paths)."""
    def sub(m: re.Match[str]) -> str:
        v = os.environ.get(m.group(1))
        if v:
            return v
        if m.group(2) is not None:
            return m.group(2)
        raise UserError(f"preset value {value!r} needs ${m.group(1)} set (or a ${{VAR:-default}})", 2)

    out = _VAR_RE.sub(sub, value)
    return os.path.expanduser(out)


def preset_dirs() -> list[Path]:
    dirs = []
    from .settings import PRESETS

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


def _find_preset(path_or_name: str) -> Path:
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


def config_from_mapping(data: dict[str, Any], origin: str = "preset") -> LaunchConfig:
    """A LaunchConfig from preset-style keys; UserError(2) for unknown keys or wrong types."""
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key not in FIELDS:
            raise UserError(f"{origin}: unknown key {raw_key!r}; known keys: {', '.join(sorted(FIELDS))}", 2)
        if value is None:
            continue
        if key == "aux_layers" and isinstance(value, list):
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
        elif key in _STR_KEYS:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise UserError(f"{origin}: {raw_key} must be a string, got {value!r}", 2)
            value = (expand(str(value)) if key in ("model", "draft", "adaptive", "log", "profile_out", "python")
                     else str(value))
        kwargs[key] = value
    return LaunchConfig(**kwargs)


def load_preset(path_or_name: str) -> LaunchConfig:
    """Read ``launch/<name>.yaml`` (or any YAML file); UserError(2) if malformed or unknown keys."""
    path = _find_preset(path_or_name)
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"preset {path}: not a text file (byte {exc.start} is not UTF-8)", 2) from None
    except OSError as exc:
        raise UserError(f"preset {path}: cannot read it ({exc.strerror})", 2) from None
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
    if changes.get("adaptive"):
        # --adaptive decides the start steps (flags.apply_adaptive); a preset's static spec values
        # (e.g. topk 4) would contradict it. Values given with --adaptive itself are kept.
        for k in ("steps", "topk", "draft_tokens"):
            changes.setdefault(k, None)
        changes.setdefault("no_spec", False)
    return dataclasses.replace(cfg, **changes)


# --------------------------------------------------------------------------------------------
# argv + env
# --------------------------------------------------------------------------------------------

def build_command(cfg: LaunchConfig, *, node_rank: int | None = None,
                  environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The exact argv (a list) and the env variables the wrapper adds to the user's env.

    NCCL preset values never override a variable already set in ``environ`` (default os.environ);
    ``cfg.env`` (set explicitly in a preset) wins over both.
    """
    from . import flags

    environ = dict(os.environ if environ is None else environ)
    argv = [cfg.python or sys.executable, "-m", cfg.server_module, "--model-path", str(cfg.model)]
    if not cfg.no_spec:
        argv += ["--speculative-algorithm", flags.normalise_algorithm(cfg.algorithm)]
        if cfg.draft:
            argv += ["--speculative-draft-model-path", str(cfg.draft)]
        if cfg.steps is not None:
            argv += ["--speculative-num-steps", str(cfg.steps)]
        if cfg.topk is not None:
            argv += ["--speculative-eagle-topk", str(cfg.topk)]
        if cfg.draft_tokens is not None:
            argv += ["--speculative-num-draft-tokens", str(cfg.draft_tokens)]
        if cfg.adaptive:
            argv += ["--speculative-adaptive", "--speculative-adaptive-config",
                     str(Path(cfg.adaptive).expanduser().absolute())]
    if cfg.tp is not None and cfg.tp != 1:
        argv += ["--tp-size", str(cfg.tp)]
    if cfg.nnodes > 1:
        argv += ["--nnodes", str(cfg.nnodes), "--node-rank", str(node_rank or 0),
                 "--dist-init-addr", str(cfg.dist_init_addr)]
    argv += ["--host", cfg.host, "--port", str(cfg.port)]
    argv += [str(a) for a in cfg.extra_args]

    env: dict[str, str] = {}
    nccl = (cfg.nccl or "none").strip()
    if nccl != "none":
        from . import nccl as nccl_mod

        for k, v in nccl_mod.preset_env(nccl).items():
            if k not in environ:  # the user's own value wins (same rule as nccl.apply_preset)
                env[k] = v
        # The plugin (0.5.11+) re-applies the preset inside every SGLang process.
        env[NCCL.name] = nccl
    if cfg.profile:
        env[PROFILE.name] = "1"
        if cfg.profile_every is not None:
            env[PROFILE_EVERY.name] = str(cfg.profile_every)
        if cfg.profile_mode:
            env[PROFILE_MODE.name] = cfg.profile_mode
        if cfg.profile_out:
            env[PROFILE_OUT.name] = str(Path(cfg.profile_out).expanduser().absolute())
        spec = cfg.spec_string()
        if spec:
            env[PROFILE_SPEC.name] = spec
    if cfg.aux_layers:
        from .layers import format_layers, parse_layers  # the one parser; normalised spelling

        env[AUX_LAYERS.name] = format_layers(parse_layers(str(cfg.aux_layers)))
    env.update(cfg.env)
    return argv, env


def node_commands(cfg: LaunchConfig, environ: dict[str, str] | None = None
                  ) -> list[tuple[list[str], dict[str, str]]]:
    """One (argv, env) per node for ``--nnodes N`` (same env everywhere, only --node-rank differs)."""
    return [build_command(cfg, node_rank=r, environ=environ) for r in range(cfg.nnodes)]


# --------------------------------------------------------------------------------------------
# Log-driven status
# --------------------------------------------------------------------------------------------

# SGLang's startup log lines (0.4.10.post2 .. 0.5.23; model_runner.py "Load weight begin/end",
# cuda_graph_runner.py "Capture cuda graph begin" / 0.5.16+ "Capture {name} CUDA graph begin",
# http_server.py "The server is fired up and ready to roll!").
STATUS_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Init torch distributed begin", re.I), "initialising torch distributed"),
    (re.compile(r"Load weight begin", re.I), "loading weights"),
    (re.compile(r"Load weight end", re.I), "weights loaded"),
    (re.compile(r"KV Cache is allocated|Memory pool end", re.I), "KV cache allocated"),
    (re.compile(r"Capture .*cuda graph begin", re.I), "capturing CUDA graphs"),
    (re.compile(r"Capture .*cuda graph end", re.I), "CUDA graphs captured"),
    (re.compile(r"Uvicorn running on|Application startup complete", re.I), "HTTP up, warming up"),
    (re.compile(r"fired up and ready to roll", re.I), "ready"),
)


def status_of(line: str) -> str | None:
    for pat, label in STATUS_PATTERNS:
        if pat.search(line):
            return label
    return None


class ServerFailed(UserError):
    """The server exited or never became healthy; ``log_tail`` holds its last log lines."""

    def __init__(self, message: str, log_tail: list[str]) -> None:
        super().__init__(message, exit_code=1)
        self.log_tail = log_tail


# --------------------------------------------------------------------------------------------
# The process
# --------------------------------------------------------------------------------------------

def port_in_use(host: str, port: int) -> bool:
    probe = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    with socket.socket(socket.AF_INET6 if ":" in probe else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((probe, int(port))) == 0


def pgid_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace: float = DEFAULT_GRACE, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole group, SIGKILL whatever is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()  # reap the leader so the group can empty
        if not pgid_alive(pgid):
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        for _ in range(50):
            if proc is not None:
                proc.poll()
            if not pgid_alive(pgid):
                break
            time.sleep(0.1)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


class Server:
    """One SGLang server process group. ``Server(cfg).start()`` returns once it is healthy.

    Validation is the caller's job (``flags.validate``): ``start`` only refuses a busy port.
    """

    def __init__(self, cfg: LaunchConfig, *, environ: dict[str, str] | None = None,
                 on_status: Callable[[str], None] | None = None, grace: float = DEFAULT_GRACE) -> None:
        self.cfg = cfg
        self.environ = dict(os.environ if environ is None else environ)
        self.on_status = on_status
        self.grace = grace
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.status = "not started"
        self.health_path: str | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._log_pos = 0
        self._partial = ""
        self.log_path = Path(cfg.log).expanduser().absolute() if cfg.log else self._default_log()

    def _default_log(self) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path.cwd() / "sgl-eagle3-logs" / f"{self.cfg.name or 'server'}-{self.cfg.port}-{stamp}.log"

    @property
    def url(self) -> str:
        return self.cfg.url

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> tuple[list[str], dict[str, str]]:
        return build_command(self.cfg, environ=self.environ)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, wait: bool = True, timeout: float | None = None) -> Server:
        if self.proc is not None:
            raise UserError("this Server was already started", 2)
        if port_in_use(self.cfg.host, self.cfg.port):
            raise UserError(f"port {self.cfg.port} on {self.cfg.host} is already in use "
                            f"(another server? `sgl-eagle3 stop --all`, or pick --port)", 2)
        argv, add = self.command()
        env = dict(self.environ)
        env.update(add)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         close_fds=True)
        self.pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        self._set_status("starting")
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float | None = None) -> None:
        """Poll the log (status) and the health endpoint until healthy; ServerFailed otherwise."""
        assert self.proc is not None
        limit = timeout if timeout is not None else (self.cfg.timeout or DEFAULT_TIMEOUT)
        deadline = time.monotonic() + limit
        while True:
            self._read_log()
            rc = self.proc.poll()
            if rc is not None:
                self._read_log()
                self.stop()  # children may outlive the leader
                raise ServerFailed(f"server exited with code {rc} before it was healthy "
                                   f"(log: {self.log_path})", self.tail())
            if self._healthy():
                self._set_status("ready")
                return
            if time.monotonic() > deadline:
                self._read_log()
                self.stop()
                raise ServerFailed(f"server not healthy after {limit:.0f} s (--timeout); stopped it "
                                   f"(log: {self.log_path})", self.tail())
            time.sleep(0.25)

    def stop(self, grace: float | None = None) -> int | None:
        """Stop the whole process group (SIGTERM, then SIGKILL after the grace period)."""
        if self.proc is None or self.pgid is None:
            return None
        kill_group(self.pgid, self.grace if grace is None else grace, self.proc)
        self._read_log()
        self._set_status("stopped")
        return self.proc.returncode

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, poll: float = 0.5) -> int:
        """Block while the server runs (foreground mode), keeping the log tail fresh."""
        assert self.proc is not None
        while self.proc.poll() is None:
            self._read_log()
            time.sleep(poll)
        self._read_log()
        return self.proc.returncode

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        return list(self._tail)[-n:]

    def __enter__(self) -> Server:
        if self.proc is None:
            self.start(wait=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------
    def _set_status(self, text: str) -> None:
        if text != self.status:
            self.status = text
            if self.on_status:
                self.on_status(text)

    def _read_log(self) -> None:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_pos)
                chunk = f.read()
        except OSError:
            return
        if not chunk:
            return
        self._log_pos += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace")
        lines = re.split(r"\r?\n|\r", text)
        self._partial = lines.pop()
        for line in lines:
            self._tail.append(line)
            label = status_of(line)
            if label and self.status != "ready":
                self._set_status(label)

    def _healthy(self) -> bool:
        paths = [self.health_path] if self.health_path else ["/health", "/health_generate", "/v1/models"]
        for path in paths:
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as r:
                    if r.status == 200:
                        self.health_path = path
                        return True
                    return False
            except urllib.error.HTTPError as e:
                if e.code == 404 and not self.health_path:
                    continue  # endpoint absent in this release: try the next one
                return False
            except (urllib.error.URLError, OSError):
                return False
        return False


# --------------------------------------------------------------------------------------------
# Pid files (detached servers)
# --------------------------------------------------------------------------------------------

def default_pid_file(cfg: LaunchConfig) -> Path:
    return state_dir() / f"server-{cfg.port}.json"


def write_pid_file(server: Server, path: Path) -> Path:
    assert server.proc is not None
    argv, env = server.command()
    info = {"pid": server.proc.pid, "pgid": server.pgid, "url": server.url,
            "log": str(server.log_path), "argv": argv, "env": env, "name": server.cfg.name,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_pid_file(path: Path) -> dict[str, Any]:
    """A pid file written by `launch --detach`, checked field by field: `stop` signals only a
    group it recorded (pgid == leader pid > 1, not our own group) and can verify (argv)."""
    try:
        info = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError as exc:
        raise UserError(f"pid file {path}: not found", 2) from exc
    except IsADirectoryError as exc:
        raise UserError(f"pid file {path}: is a folder", 2) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"pid file {path}: unreadable ({exc})", 2) from exc
    if not isinstance(info, dict) or not _is_int(info.get("pgid")):
        raise UserError(f"pid file {path}: no pgid in it (not written by sgl-eagle3 launch --detach?)", 2)
    pgid, pid = info["pgid"], info.get("pid", info["pgid"])
    if pgid <= 1 or not _is_int(pid) or pid != pgid:
        raise UserError(f"pid file {path}: pgid {pgid!r} / pid {pid!r} is not a server group this tool "
                        "records (launch --detach makes the server its own group leader); not touching it", 2)
    if pgid == os.getpgrp():
        raise UserError(f"pid file {path}: pgid {pgid} is this command's own process group; not touching it", 2)
    argv = info.get("argv")
    if not (isinstance(argv, list) and len(argv) >= 3 and all(isinstance(a, str) for a in argv)
            and argv[1] == "-m" and argv[2]):
        raise UserError(f"pid file {path}: no server argv recorded, so the process group cannot be "
                        "verified; not touching it (delete the file, stop the server by hand)", 2)
    return info


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def pid_files() -> list[Path]:
    d = state_dir()
    return sorted(d.glob("server-*.json")) if d.is_dir() else []


def stop_from_pid_file(path: Path, grace: float = DEFAULT_GRACE) -> str:
    """Stop the group a pid file names; remove the file. Returns what happened, in words."""
    info = read_pid_file(path)
    pgid = int(info["pgid"])
    if not pgid_alive(pgid):
        path.unlink(missing_ok=True)
        return f"{info.get('url', '?')}: already gone (pgid {pgid}); removed {path}"
    if not _group_is_ours(info):
        raise UserError(f"pid file {path}: pgid {pgid} now belongs to another program; not touching it "
                        f"(delete the stale file)", 1)
    kill_group(pgid, grace)
    left = pgid_alive(pgid)
    path.unlink(missing_ok=True)
    if left:
        raise UserError(f"{info.get('url', '?')}: pgid {pgid} still has processes after SIGKILL", 1)
    return f"stopped {info.get('url', '?')} (pgid {pgid}, log {info.get('log')})"


def _group_is_ours(info: dict[str, Any]) -> bool:
    """Guard against pid reuse: some process of the group must still run the recorded server
    module (the leader, or, once it is gone, one of its children, which SGLang titles
    ``sglang::...``). A process we cannot read is not proof."""
    pgid = int(info["pgid"])
    module = info["argv"][2].encode()
    found = False
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) != pgid:
                continue
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if int(d.name) == pgid:  # the leader decides when it is alive
            return b"-m" in argv and module in argv
        found = found or module in argv or argv[0].startswith(b"sglang::")
    return found


def scheduler_pids(pgid: int) -> list[int]:
    """The scheduler processes of one server (its process group; SGLang titles them
    ``sglang::scheduler*``): where EAGLE3_PROFILE_TOGGLE's signal goes (docs/profiling.md)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            title = (d / "cmdline").read_bytes().split(b"\0")[0]
            if title.startswith(b"sglang::scheduler") and os.getpgid(int(d.name)) == pgid:
                pids.append(int(d.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return sorted(pids)
