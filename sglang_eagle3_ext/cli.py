"""`sgl-eagle3`: thin argument parsing; each subcommand lives in ``commands/<name>.py``.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Every command gets ``--sglang-root PATH`` (an unpacked SGLang instead of the installed one).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from . import __version__
from .commands.flagnames import add_aliases
from .commands.flagnames import parse_args as parse_known_names
from .runtime.errors import UserError

# Order is the order shown in --help. Modules are imported lazily, so `sgl-eagle3 doctor` never
# pays for matplotlib or torch.
COMMANDS = (
    "doctor", "patch", "layers", "launch", "stop", "bench", "compare", "profile", "sweep", "scan", "calibrate", "adaptive",
    "tiny", "traffic", "demo", "report",
)
# The commands that read an SGLang tree; the others (bench, compare, profile, stop, tiny) work on
# servers, files or models only, so they do not offer --sglang-root.
SGLANG_ROOT_COMMANDS = frozenset({"doctor", "patch", "layers", "launch", "sweep", "scan", "demo"})


def _load(name: str):
    return importlib.import_module(f"sglang_eagle3_ext.commands.{name}")


def build_parser(commands: tuple[str, ...] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sgl-eagle3",
        description="Measure and tune EAGLE-3 speculative decoding on SGLang.",
    )
    parser.add_argument("--version", action="version", version=f"sgl-eagle3 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        try:
            mod = _load(name)
        except ModuleNotFoundError as exc:  # a command still being built: hide it, don't break the CLI
            if exc.name and exc.name.startswith("sglang_eagle3_ext.commands"):
                continue
            raise
        # argparse %-formats help strings: a literal "%" in a one-liner must not break --help
        p = sub.add_parser(name, help=mod.HELP.replace("%", "%%"), description=mod.HELP)
        if name in SGLANG_ROOT_COMMANDS:
            p.add_argument("--sglang-root", metavar="PATH", default=None,
                           help="an unpacked SGLang tree to use instead of the installed one")
        mod.add_arguments(p)
        add_aliases(p, name)  # SGLang's / bench_serving's spellings of the same options
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The console script's entry. Ctrl-C at any moment, also in the first half second while the
    command modules import (rich, yaml, ...), ends with exit 130 and no traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130


def _main(argv: list[str] | None = None) -> int:
    from .runtime.settings import adopt_old_names

    adopt_old_names()  # old names -> SGLANG_EAGLE3_*, one note each (SGLang owns the SGL_ prefix)
    parser = build_parser()
    try:  # an SGLang or bench_serving name we do not take: one line naming ours, exit 2
        args = parse_known_names(parser, argv)
    except UserError as exc:
        from .commands.console import err

        err.print("[bold red]error:[/] ", end="", highlight=False)
        err.print(str(exc), markup=False, highlight=False)
        return exc.exit_code
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UserError as exc:
        from .commands.console import err

        # markup off for the message: paths and flags like "[2, 30]" must print verbatim
        err.print("[bold red]error:[/] ", end="", highlight=False)
        err.print(str(exc), markup=False, highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - last resort: a bug of ours is still one line
        from .commands.console import err
        from .runtime.settings import DEBUG

        if DEBUG.get():
            raise
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        at = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where else ""
        err.print("[bold red]error:[/] ", end="", highlight=False)
        err.print(f"unexpected {type(exc).__name__}{at}: {exc} (a bug in sgl-eagle3: please report it; "
                  f"{DEBUG.name}=1 shows the traceback)", markup=False, highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
