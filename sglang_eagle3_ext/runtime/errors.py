"""One exception type for every input problem: the CLI prints its message on one line and exits."""

from __future__ import annotations

# The exit codes every command keeps (docs/reference/architecture.md, "Exit codes"):
OK = 0
FAILED = 1      # the input was fine; the run failed, a check found a problem, or this machine lacks something
BAD_INPUT = 2   # the command line or an input file is wrong (argparse's own code for a usage error)
INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix (bad flag, unknown SGLang layout, missing file).

    ``exit_code``: ``BAD_INPUT`` (2) when what was given is wrong (a flag value, a path, a file that is
    missing, malformed or of another kind), said before anything started; ``FAILED`` (1, the
    default) when the input was fine and the run failed, a check found a problem, or the machine
    lacks something (SGLang not installed, a dependency missing).
    """

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code
