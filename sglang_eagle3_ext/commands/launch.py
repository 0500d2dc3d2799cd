"""`sgl-eagle3 launch`: start a (profiled) SGLang server with validated speculative flags."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..runtime.errors import UserError
from . import split_preset_words
from .console import err, out

HELP = "Start an SGLang server from a preset and/or flags, after checking the speculative flags."

EPILOG = """\
Examples:
  sgl-eagle3 launch kimi-k25-eagle3 --dry-run
  sgl-eagle3 launch tiny --profile --profile-out prof.jsonl
  sgl-eagle3 launch --model M --draft D --steps 2 --topk 1 --draft-tokens 3 -- --mem-fraction-static 0.8
Everything after `--` goes to SGLang unchanged (after the same checks).
"""


# Options of this command only (not launch settings), placed after the field they follow in --help.
_COMMAND_OPTIONS: dict[str, list[tuple[str, dict]]] = {
    "timeout": [
        ("--detach", {"action": "store_true", "help": "leave it running; write a pid file for `stop`"}),
        ("--pid-file", {"metavar": "FILE", "help": "pid file for --detach (default ~/.cache/...)"}),
    ],
    "dist_init_addr": [
        ("--dry-run", {"action": "store_true", "help": "print argv and env additions; start nothing"}),
    ],
}
_TYPES = {"int": int, "float": float}


def _add_options(p: argparse.ArgumentParser) -> None:
    """One option per LaunchConfig field with CLI metadata (launch_config.py), grouped as there."""
    from ..serve.launch_config import CLI_FIELDS, GROUPS, value_kind

    for group in GROUPS:
        g = p.add_argument_group(group)
        for f in CLI_FIELDS:
            if f.metadata["group"] != group:
                continue
            m = f.metadata
            kind = value_kind(f)
            kwargs: dict = {"help": argparse.SUPPRESS if m["hidden"] else m["help"]}
            if kind == "bool":
                # store_true with default None: "not given" must not override a preset's value.
                kwargs.update(action="store_true", default=None)
            else:
                if kind in _TYPES:
                    kwargs["type"] = _TYPES[kind]
                if m["metavar"]:
                    kwargs["metavar"] = m["metavar"]
            g.add_argument(m["cli"], **kwargs)
            for flag, extra in _COMMAND_OPTIONS.get(f.name, []):
                g.add_argument(flag, **extra)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    _add_options(p)
    # REMAINDER keeps `--` and everything after it; run() splits preset / options / SGLang args.
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="[PRESET] [-- SGLANG_ARGS]",
                   help="a preset name (launch/*.yaml) or YAML path, then `--` and extra SGLang args")


def _split_words(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    return split_preset_words(args, "sgl-eagle3 launch", _add_options)


def build_config(args: argparse.Namespace):
    from ..serve import launch_config

    preset, extra = _split_words(args)
    cfg = launch_config.load_preset(preset) if preset else launch_config.LaunchConfig()
    cfg = launch_config.override(cfg, **launch_config.cli_values(args))
    if extra:
        cfg.extra_args = list(cfg.extra_args) + extra
    return cfg


def _print_command(argv: list[str], env: dict[str, str], title: str | None = None) -> None:
    import os

    from ..serve.stepenv import inherited

    if title:
        out.print(f"# {title}", highlight=False, markup=False)
    dropped, kept = inherited(os.environ, env)
    if dropped:  # exported in this shell, not passed on: `unset` lines keep a pasted command faithful
        out.print("# exported in this shell, not passed to the server (set only by this launch's own flags: "
                  "--nccl, --profile; docs/guide/launch.md)", highlight=False, markup=False)
        out.print(f"unset {' '.join(shlex.quote(k) for k in dropped)}", highlight=False, markup=False)
    if kept:
        out.print("# inherited from this shell (probe settings no flag sets): "
                  + " ".join(f"{k}={shlex.quote(v)}" for k, v in kept.items()), highlight=False, markup=False)
    if env:
        # `export` lines, names and values shell-quoted: pasted into a shell before the command,
        # the server sees exactly these values (a bare NAME=value line would not be exported)
        out.print("# env additions (export them in the shell that runs the command)",
                  highlight=False, markup=False)
        from ..serve.stepenv import WHAT

        for k in (k for k in env if k in WHAT):  # read by every later SGLang process of that shell
            out.print(f"# {k} makes EVERY SGLang process started from that shell {WHAT[k].format(v=env[k])}: "
                      f"run the command in a subshell ( ... ) or `unset {k}` once the server stops; "
                      "sgl-eagle3 refuses to start servers while it is exported", highlight=False, markup=False)
        for k, v in env.items():
            out.print(f"export {shlex.quote(k)}={shlex.quote(v)}", highlight=False, markup=False)
    else:
        out.print("# env additions: none", highlight=False, markup=False)
    out.print("# command", highlight=False, markup=False)
    parts, line = [], [shlex.quote(a) for a in argv[:3]]
    for a in argv[3:]:
        if a.startswith("--") and line:
            parts.append(" ".join(line))
            line = []
        line.append(shlex.quote(a))
    parts.append(" ".join(line))
    out.print(" \\\n    ".join(parts), highlight=False, markup=False)


def _notes(notes: list[str]) -> None:
    for n in notes:
        err.print(f"note: {n}", highlight=False, markup=False)


def _env_notes(cfg, preset: str | None) -> list[str]:
    """What this launch inherits or drops from the shell, the preset file it read, and a
    --profile-out file that already holds records (a restarted server appends to it)."""
    import os

    from ..runtime.settings import PRESETS
    from ..serve import server
    from ..serve.stepenv import inherited_notes

    notes = inherited_notes(os.environ, server.build_command(cfg)[1])
    if preset and PRESETS.is_set():  # which folder won: $SGLANG_EAGLE3_PRESETS or the repository's launch/
        from ..serve.launch_config import find_preset

        notes.insert(0, f"preset {preset}: read {find_preset(preset)} ({PRESETS.name}={PRESETS.raw()})")
    if cfg.profile and cfg.profile_out:
        from ..documents.prof_records import count_records

        held = count_records(Path(cfg.profile_out).expanduser())
        if held:
            notes.append(f"--profile-out {cfg.profile_out} already holds {held} window record(s); this server "
                         "appends after them (`profile` reads each server process's windows apart and leaves "
                         "out each one's first window; another file keeps the runs apart)")
    return notes


def run(args: argparse.Namespace) -> int:
    from ..runtime.sglang_env import locate
    from ..serve import flags, server

    cfg = build_config(args)
    from ..serve.stepenv import refuse_exported

    for flag, value in (("--profile-out", cfg.profile_out), ("--log", cfg.log)):
        try:  # pathlib cannot expand "~nouser/x": one line, not "unexpected RuntimeError"
            Path(value).expanduser() if value else None
        except RuntimeError:
            raise UserError(f"{flag} {value}: names the home folder of an unknown user", 2) from None
    # the dry run too: it shows what the real launch would do (refuse); a value this launch sets wins
    refuse_exported("launch", own={**cfg.env, **({"SGLANG_EAGLE3_AUX_LAYERS": "flag"} if cfg.aux_layers else {})})
    env = locate(args.sglang_root)
    try:
        notes = flags.validate(cfg, env, sglang_check=False if args.no_sglang_check else None)
    except UserError as exc:
        # SGLang's own check needs an SGLang that imports (on CPU boxes its chain reaches a
        # missing torchvision). A dry run starts nothing, so it goes on with our checks and says
        # so; a real launch still stops here.
        if not (args.dry_run and exc.exit_code == 1 and "could not import SGLang" in str(exc)):
            raise
        cfg = build_config(args)  # afresh: the first pass already wrote --policy's config into cfg
        notes = flags.validate(cfg, env, sglang_check=False)
        why = str(exc).split("(", 1)[-1].split(");", 1)[0]
        notes.append(f"SGLang's own argument check skipped for this dry run: it cannot import SGLang "
                     f"here ({why}). Our release rules passed; a real launch runs SGLang's check first")
    _notes(notes + _env_notes(cfg, _split_words(args)[0]))
    if not cfg.no_spec and flags.normalise_algorithm(cfg.algorithm) == "EAGLE3":
        from ..serve.capture_line import capture_notes  # which target layers feed the draft

        for line in capture_notes(cfg.model, cfg.draft, env.version, cfg.aux_layers, str(env.package_dir),
                                  trained_on=cfg.trained_on):
            err.print(line, highlight=False, markup=False)
    from ..serve.trees_launch import summary as trees_summary

    for line in trees_summary(cfg):  # --trees: the trees, their graph sizes, the sizing envelope
        out.print(line, highlight=False, markup=False)

    if args.dry_run or cfg.nnodes > 1:
        if cfg.nnodes > 1:
            out.print(f"# {cfg.nnodes} nodes: run one command per node (same env everywhere); "
                      f"nothing was started", highlight=False, markup=False)
            for rank, (argv, add) in enumerate(server.node_commands(cfg)):
                _print_command(argv, add, title=f"node {rank}")
        else:
            argv, add = server.build_command(cfg)
            _print_command(argv, add, title=f"SGLang {env.version}; dry run, nothing started")
        return 0

    live = err.is_terminal
    status_ctx = err.status("starting SGLang", spinner="dots") if live else None

    def on_status(text: str) -> None:
        if status_ctx is not None:
            status_ctx.update(f"SGLang: {text}  (log {srv.log_path})")
        else:
            err.print(f"[launch] {text}", highlight=False, markup=False)

    srv = server.Server(cfg, on_status=on_status)

    pid_file = None
    if args.detach:  # before the server starts: a detached server nobody can find must not exist
        pid_file = server.check_pid_file(Path(args.pid_file) if args.pid_file else server.default_pid_file(cfg))
    if server.port_in_use(cfg.host, cfg.port):  # before the log line: no log is written then
        raise UserError(f"port {cfg.port} on {cfg.host} is already in use "
                        f"(another server? `sgl-eagle3 stop --all`, or pick --port)", 2)
    from ..serve.interrupts import as_interrupt

    with as_interrupt():  # SIGTERM/SIGHUP -> same path as Ctrl-C: stop the whole group
        return _start(args, cfg, srv, status_ctx, pid_file)


def _start(args: argparse.Namespace, cfg, srv, status_ctx, pid_file: Path | None) -> int:
    from ..serve import server

    ready = False
    try:
        err.print(f"log: {srv.log_path}", highlight=False, markup=False)
        try:
            if status_ctx is not None:
                with status_ctx:
                    srv.start(wait=True)
            else:
                srv.start(wait=True)
        except server.ServerFailed as exc:
            err.print(f"--- last {len(exc.log_tail)} lines of {srv.log_path} ---", highlight=False, markup=False)
            for line in exc.log_tail:
                err.print(line, highlight=False, markup=False)
            raise
        _built_lines(cfg, srv)
        if pid_file is not None:
            try:
                server.write_pid_file(srv, pid_file)
            except OSError as exc:  # checked before the start; the folder changed meanwhile
                srv.stop()
                raise UserError(f"pid file {pid_file}: could not write it ({exc.strerror or exc}); "
                                "stopped the server (`stop` could not have found it)", 1) from None
            ready = True
            out.print(f"ready: {srv.url} (pid {srv.pid}, pgid {srv.pgid})", highlight=False, markup=False)
            out.print(f"pid file: {pid_file}; stop with: sgl-eagle3 stop --pid-file {shlex.quote(str(pid_file))}",
                      highlight=False, markup=False)
            return 0
        ready = True
        out.print(f"ready: {srv.url} (pid {srv.pid}); Ctrl-C stops it", highlight=False, markup=False)
        rc = srv.wait()
        tail = srv.tail()
        err.print(f"server exited with code {rc}; last {len(tail)} log lines:", highlight=False, markup=False)
        for line in tail:
            err.print(line, highlight=False, markup=False)
        return 1
    except KeyboardInterrupt:
        err.print("stopping the server (whole process group)...", highlight=False, markup=False)
        srv.stop()
        return 0 if ready else 130
    finally:
        if not (args.detach and ready) and srv.is_running():
            srv.stop()



def _built_lines(cfg, srv) -> None:
    """--trees: what building each extra state cost, as the server logged it (SGLang's 'Built
    adaptive runtime state ... elapsed, mem' and the plugin's 'trees: built ...' lines)."""
    if not cfg.trees:
        return
    from ..serve.trees_launch import log_lines

    lines = log_lines(srv.log_path)
    out.print(f"states built (server log {srv.log_path}):" if lines else
              f"states built: no 'Built adaptive runtime state' line in {srv.log_path} yet", highlight=False,
              markup=False)
    for line in lines:
        out.print(f"  {line}", highlight=False, markup=False)
