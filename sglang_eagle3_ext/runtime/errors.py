"""One exception type for every input problem: the CLI prints its message on one line and exits."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad flag, unknown SGLang layout, missing file).

    ``exit_code`` 2 is for invalid input caught before anything ran, 1 for everything else.
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
