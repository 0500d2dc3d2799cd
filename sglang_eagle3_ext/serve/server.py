"""Start, watch and stop one SGLang server: process group, health wait, pid files.

The process side of a launch. What a launch is (``LaunchConfig``, presets) lives in
``launch_config``; the rules and the SGLang argv/env built from a config live in ``flags``; both
are re-exported here for callers that know them as ``server.*``.

The command line is always a list handed to ``subprocess.Popen`` (never a shell string); the server
runs in its own session/process group so one ``killpg`` reaches every SGLang child (tokenizer,
schedulers, detokenizer) and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.resources import cache_root
from ..runtime.safeparse import MIB, Unreadable, json_loads, read_bytes
from ..runtime.settings import POLICY
from .flags import build_command, node_commands
from .launch_config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    FIELDS,
    REPO_LAUNCH_DIR,
    LaunchConfig,
    config_from_mapping,
    expand,
    list_presets,
    load_preset,
    override,
    preset_dirs,
)

# Re-exports: the configuration and argv names callers (tests, tools/gpu) use as ``server.*``.
__all__ = [
    "DEFAULT_GRACE", "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_TIMEOUT", "FIELDS", "REPO_LAUNCH_DIR",
    "TAIL_LINES", "LaunchConfig", "Server", "ServerFailed", "build_command", "config_from_mapping",
    "check_pid_file", "default_pid_file", "expand", "kill_group", "list_presets", "load_preset", "node_commands",
    "override", "pgid_alive", "pid_files", "port_in_use", "preset_dirs", "read_pid_file",
    "scheduler_pids", "state_dir", "status_of", "stop_from_pid_file", "write_pid_file",
]

DEFAULT_GRACE = 15.0
PID_MAX = 2**22  # Linux PID_MAX_LIMIT (include/linux/threads.h): no process id is larger
TAIL_LINES = 40


def state_dir() -> Path:
    return cache_root() / "run"


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
    """Some process of the group still runs. A zombie is not running: a server stopped by `stop`
    while the command that started it (a scan) has not reaped its leader yet is gone."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _non_zombie_in(pgid)


def _non_zombie_in(pgid: int) -> bool:
    try:
        entries = [d for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return True  # no /proc to look in: the signal test is all we have
    for d in entries:
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":  # state, ppid, pgrp
            return True
    return False


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
                 on_status: Callable[[str], None] | None = None, grace: float | None = None,
                 pid_file: Path | None = None) -> None:
        self.cfg = cfg
        self.environ = dict(os.environ if environ is None else environ)
        self.on_status = on_status
        self.grace = DEFAULT_GRACE if grace is None else grace
        # written as soon as the group exists (before the health wait), removed once it is stopped:
        # `stop --all` finds a server a command is still starting or driving (scan)
        self.pid_file = pid_file
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
        if self.cfg.policy and POLICY.name not in self.cfg.env:
            # --policy is applied by flags.validate (adaptive config + env); without it the server
            # would run the static step count and look like the policy (seen on the H200, round 5)
            raise UserError(f"policy {self.cfg.policy}: not applied to this launch (flags.validate writes its "
                            "adaptive config and sets " + POLICY.name + "); refusing to start a static server", 2)
        if port_in_use(self.cfg.host, self.cfg.port):
            raise UserError(f"port {self.cfg.port} on {self.cfg.host} is already in use "
                            f"(another server? `sgl-eagle3 stop --all`, or pick --port)", 2)
        argv, add = self.command()
        from .stepenv import child_env, refuse_exported

        refuse_exported("sgl-eagle3", self.environ, add)  # every caller: never silently drive a server
        env = child_env(self.environ, add)  # our exported NCCL / probe variables: only what this launch sets
        if self.log_path.is_symlink():  # "wb" would truncate whatever it points at
            raise UserError(f"log {self.log_path}: a symbolic link; refused (the log is truncated at the "
                            "start: its target would be lost); give another --log", 2)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         close_fds=True)
        self.pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        if self.pid_file is not None:
            try:
                write_pid_file(self, self.pid_file)
            except OSError as exc:  # checked before the start (check_pid_file); changed meanwhile
                self.stop()
                raise UserError(f"pid file {self.pid_file}: could not write it ({exc.strerror or exc}); "
                                "stopped the server (`stop --all` could not have found it)", 1) from None
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
        if self.pid_file is not None and not pgid_alive(self.pgid):
            with contextlib.suppress(OSError):
                self.pid_file.unlink()
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


def check_pid_file(path: Path) -> Path:
    """Before a detached server starts: its pid file can be written there, or one UserError line
    (a folder in the way, a file where the folder should be, no permission). Without a pid file
    `stop` could never find the server again."""
    try:
        p = Path(path).expanduser()
    except RuntimeError:
        raise UserError(f"pid file {path}: names the home folder of an unknown user", 2) from None
    if p.is_dir():
        raise UserError(f"pid file {p}: is a folder; give a file name", 2)
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"pid file {p}: a part of this path is a file, not a folder (check "
                        "--pid-file or SGLANG_EAGLE3_CACHE)", 2) from None
    except OSError as exc:
        raise UserError(f"pid file {p}: cannot write in {p.parent} ({exc.strerror}); pick --pid-file "
                        "or SGLANG_EAGLE3_CACHE", 2) from None
    os.close(fd)
    os.unlink(tmp)
    return p


def write_pid_file(server: Server, path: Path) -> Path:
    """Mode 0600, written to a fresh O_EXCL temp name (mkstemp: never a name someone could have
    put a symlink at) and renamed over ``path`` (a symlink there is replaced, never followed).
    Env variable NAMES only: a preset's values may be tokens."""
    assert server.proc is not None
    argv, env = server.command()
    info = {"pid": server.proc.pid, "pgid": server.pgid, "url": server.url,
            "log": str(server.log_path), "argv": argv, "env_names": sorted(env), "name": server.cfg.name,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(info, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def read_pid_file(path: Path) -> dict[str, Any]:
    """A pid file written by `launch --detach`, checked field by field: `stop` signals only a
    group it recorded (pgid == leader pid > 1, not our own group) and can verify (argv)."""
    try:  # bounded, regular files only: a FIFO in the pid folder never hangs `stop --all`
        info = json_loads(read_bytes(path, what="a pid file", limit=MIB).decode("utf-8"))
    except Unreadable as exc:
        why = str(exc).split(": ", 1)[-1]
        if "no such file" in why:
            raise UserError(f"pid file {path}: not found", 2) from None
        raise UserError(f"pid file {path}: {'is a folder' if 'folder' in why else 'unreadable (' + why + ')'}", 2) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"pid file {path}: unreadable ({exc})", 2) from exc
    if not isinstance(info, dict) or not _is_int(info.get("pgid")):
        raise UserError(f"pid file {path}: no pgid in it (not written by sgl-eagle3 launch --detach?)", 2)
    pgid, pid = info["pgid"], info.get("pid", info["pgid"])
    if pgid <= 1 or pgid > PID_MAX or not _is_int(pid) or pid != pgid:
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
    ``sglang::scheduler*``): where EAGLE3_PROFILE_TOGGLE's signal goes (docs/guide/profiling.md)."""
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
