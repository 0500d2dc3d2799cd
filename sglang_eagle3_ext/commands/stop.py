"""`sgl-eagle3 stop`: end a server started with `sgl-eagle3 launch --detach` (its whole group)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..runtime.errors import UserError
from .console import out

HELP = "Stop a detached server (SIGTERM to its process group, SIGKILL after a grace period)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pid-file", metavar="FILE", help="pid file written by `launch --detach`")
    g.add_argument("--all", action="store_true", help="every server listed in the default pid folder")
    p.add_argument("--grace", type=float, default=None, metavar="S",
                   help="seconds between SIGTERM and SIGKILL (default 15)")


def run(args: argparse.Namespace) -> int:
    from ..serve import server

    grace = server.DEFAULT_GRACE if args.grace is None else args.grace
    if grace < 0:
        raise UserError(f"--grace {grace}: must be >= 0", 2)
    if args.pid_file:
        files = [Path(args.pid_file).expanduser()]
    else:
        files = server.pid_files()
        if not files:
            out.print(f"no detached servers recorded in {server.state_dir()}", highlight=False)
            return 0
        if len(files) > 1 and not args.all:
            names = ", ".join(str(f) for f in files)
            raise UserError(f"{len(files)} detached servers ({names}): pick one with --pid-file or use --all", 2)
    failed = 0
    for f in files:
        try:
            out.print(server.stop_from_pid_file(f, grace), highlight=False, markup=False)
        except UserError as exc:
            if len(files) == 1:
                raise
            out.print(f"{f}: {exc}", highlight=False, markup=False)
            failed += 1
    return 1 if failed else 0
