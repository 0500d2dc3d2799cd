"""The one bounded loader for YAML and JSON we read from users' files (presets, sweep files, NCCL
presets, patch specs; profile / compare / --prompts / model configs).

PyYAML's ``safe_load`` constructs no objects, but it still expands what a file asks for: an alias
bomb (each level ten aliases of the one before) is a few hundred bytes that our validation then
walks as billions of nodes, and 5000-deep nesting reaches ``RecursionError`` in the composer.
``yaml_load`` first walks the event stream (iterative, nothing built), counting the nesting depth
and the size of the document with every alias expanded, and refuses past ``MAX_DEPTH`` /
``MAX_NODES`` / ``MAX_BYTES`` with one line; a recursive alias (``&a [*a]``) is refused too. Only
then does ``yaml.safe_load`` build it. No libyaml needed.

``json_loads`` is ``json.loads`` whose deep nesting (``RecursionError`` in the decoder, or past
``MAX_DEPTH``) is a ``ValueError`` like any other malformed JSON, so each reader's "not JSON"
line covers it.

``json_loads`` also refuses what no file of ours holds and what would break the arithmetic after
it: an integer of more than ``MAX_INT_DIGITS`` digits (a 400-digit count reaches ``float()`` as an
OverflowError) and ``NaN`` / ``Infinity`` (Python's json reads them; no figure of ours is one).
``check_yaml`` refuses the same integers in YAML (PyYAML's own limit is a raw ValueError at 4300).

``read_bytes`` / ``read_text`` are the one bounded, regular-file-only file read under every
document reader, inside SGLang too (the policy's scan table): the file is opened non-blocking (a
FIFO never blocks the open), ``fstat`` of the open descriptor must say a regular file (a FIFO,
/dev/zero, a folder, a symlink to a device are refused before any byte is read, and no swap
between a check and the open is possible), its size must be within ``limit``, and at most
``limit`` + 1 bytes are read (a file that grows meanwhile, a /proc file of size 0). ``Unreadable``
(a ValueError) carries one line naming the file and the reason.

Standard library at module level (patch specs are read where the plugin runs); yaml is imported
when a YAML file is read.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import UserError

MAX_DEPTH = 64          # our files nest < 10 deep; model configs < 6
MAX_NODES = 100_000     # nodes with every alias expanded (a preset has < 100)
MAX_BYTES = 4 << 20


MAX_INT_DIGITS = 20     # 2**64 has 20 digits; no count, size or time of ours is longer

# the size caps of the documents (the reason is said with the refusal); ours are far below
MIB = 1 << 20
DOC_LIMIT = 64 * MIB        # scan.json (~40 KB measured), a policy's scan table, bench / ladder JSON
LOG_LIMIT = 512 * MIB       # probe JSONL / server logs (~1 MB per hour of windows)
CONFIG_LIMIT = 16 * MIB     # a model's config.json (a few KB)


class TooDeep(ValueError):
    """JSON nested deeper than MAX_DEPTH."""


class Unreadable(ValueError):
    """A file that is not read: not a regular file, too big, missing, not ours to read."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INT_DIGITS} in a file of ours)")
    return int(text)


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a number this tool reads (finite numbers only)")


class _Odd:
    """A value the strict parse refused, kept in place by the second parse to name its field."""

    def __init__(self, why: str) -> None:
        self.why = why


def _odd_int(text: str) -> int | _Odd:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Odd(f"must be a count or a number of at most {MAX_INT_DIGITS} digits, got an integer of "
                    f"{digits} digits")
    return int(text)


def _field_of_odd(text: str | bytes, strict: bool) -> str | None:
    """The field path and reason of the first refused value ("cells[0].cycles must be ...")."""
    try:
        data = json.loads(text, parse_int=_odd_int, **({"parse_constant": lambda n: _Odd(
            f"must be a number, got {n} (finite numbers only)")} if strict else {}))
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Odd):
            return f"{path or 'the value'} {node.why}"
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in reversed(list(items)):
            stack.append((v, f"{path}[{k}]" if isinstance(node, list) else (f"{path}.{k}" if path else str(k))))
    return None


def json_loads(text: str | bytes, *, strict: bool = True) -> Any:
    """``json.loads`` with depth, integer-size and (``strict``) NaN / Infinity refusals as
    ValueError naming the field. ``strict=False`` for third-party files (model configs): NaN and
    Infinity read as usual (integers stay bounded)."""
    try:
        data = json.loads(text, parse_int=_int, **({"parse_constant": _constant} if strict else {}))
    except RecursionError:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # our hooks: say which field (a second, permissive parse finds it)
        raise ValueError(_field_of_odd(text, strict) or str(exc)) from None
    if json_depth(data) > MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    return data


def size_words(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


PIPE_WAIT_S = 2.0      # a pipe nobody writes to: how long to wait for a writer before EOF counts
PIPE_IDLE_S = 120.0    # a writer that sends nothing for this long: refused, not waited on forever


def _read_pipe(fd: int, p: Path, what: str, limit: int) -> bytes:
    """A pipe given by name (``profile <(grep ... server.log)``): at most ``limit`` bytes, never a
    hang: EOF with no writer after PIPE_WAIT_S, a silent writer refused after PIPE_IDLE_S."""
    import select
    import time

    chunks, n, t0 = [], 0, time.monotonic()
    while n <= limit:
        ready, _, _ = select.select([fd], [], [], PIPE_IDLE_S if n else 0.05)
        if not ready:
            if n:
                raise Unreadable(f"{p}: a pipe that sent nothing for {PIPE_IDLE_S:.0f} s; refused")
            if time.monotonic() - t0 >= PIPE_WAIT_S:
                raise Unreadable(f"{p}: a pipe nobody writes to (nothing in {PIPE_WAIT_S:g} s); refused")
            continue
        try:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
        except BlockingIOError:
            continue
        if not b:
            if not n and time.monotonic() - t0 < PIPE_WAIT_S:  # its writer may not have opened it yet
                time.sleep(0.05)
                continue
            break
        chunks.append(b)
        n += len(b)
    if n > limit:
        raise Unreadable(f"{p}: a pipe of more than {size_words(limit)}; {what} is at most {size_words(limit)}")
    return b"".join(chunks)


def read_bytes(path: str | Path, *, what: str, limit: int = DOC_LIMIT, text: bool = False,
               pipe: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``Unreadable`` (one line) else.
    ``what`` names the document in the size message ("a scan result"). ``text``: a NUL byte in
    the first 8 KiB refuses the file as binary before the rest is read (a 1 GB sparse file).
    ``pipe``: a FIFO / pipe is read too, bounded and never hanging (``_read_pipe``)."""
    p = Path(path)
    via = ""
    if p.is_symlink():
        via = f" (a symbolic link to {os.path.realpath(p)})"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise Unreadable(f"{p}: no such file{via}") from None
    except IsADirectoryError:
        raise Unreadable(f"{p}: is a folder, not a file") from None
    except NotADirectoryError:
        raise Unreadable(f"{p}: a part of this path is a file, not a folder") from None
    except OSError as exc:
        raise Unreadable(f"{p}: cannot be read ({exc.strerror or exc}){via}") from None
    try:
        st = os.fstat(fd)
        if pipe and stat.S_ISFIFO(st.st_mode):
            return _read_pipe(fd, p, what, limit)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{p}: is {_kind(st.st_mode)}{via}, not a regular file; refused before reading")
        if st.st_size > limit:
            raise Unreadable(f"{p}: {size_words(st.st_size)}; {what} is at most {size_words(limit)} "
                             "(refused before reading)")
        chunks, n = [], 0
        if text:
            head = os.read(fd, min(8192, limit + 1))
            if b"\0" in head:
                raise Unreadable(f"{p}: a binary file (a NUL byte in its first 8 KiB); {what} is text")
            chunks.append(head)
            n = len(head)
        while n <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > limit:
            raise Unreadable(f"{p}: more than {size_words(limit)} (it grew while read); {what} is at most "
                             f"{size_words(limit)}")
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(f"{p}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, *, what: str, limit: int = DOC_LIMIT, errors: str = "strict",
              pipe: bool = False) -> str:
    """``read_bytes`` as UTF-8 text (``errors="replace"`` for logs); Unreadable when not UTF-8."""
    data = read_bytes(path, what=what, limit=limit, pipe=pipe)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{path}: not UTF-8 text (byte {exc.start}); {what} is a text file") from None


def load_json_file(path: str | Path, *, what: str, limit: int = DOC_LIMIT) -> Any:
    """A JSON document from a file through the bounded read; ValueError (one line) on anything."""
    text = read_text(path, what=what, limit=limit)
    try:
        return json_loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def json_depth(data: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(data, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            d += 1
            deepest = max(deepest, d)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((x, d) for x in node if isinstance(x, (dict, list)))
    return deepest


def check_yaml(text: str, origin: str) -> None:
    """UserError(2) when the YAML in ``text`` nests too deep, expands too far through aliases, or
    aliases itself; yaml.YAMLError (the caller's malformed-YAML line) for a syntax error."""
    import yaml
    from yaml import events as ev

    if len(text) > MAX_BYTES:
        raise UserError(f"{origin}: {len(text)} characters; a YAML file we read is at most "
                        f"{MAX_BYTES >> 20} MiB", exit_code=2)
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded nodes so far] per open collection

    def add(n: int) -> None:
        if stack:
            stack[-1][1] += n
            if stack[-1][1] > MAX_NODES:
                raise UserError(f"{origin}: expands to more than {MAX_NODES} values through its "
                                "aliases (&anchor / *alias); write the values out", exit_code=2)

    for e in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(e, (ev.SequenceStartEvent, ev.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                line = e.start_mark.line + 1 if e.start_mark else "?"
                raise UserError(f"{origin} line {line}: nested deeper than {MAX_DEPTH} levels",
                                exit_code=2)
            stack.append([e.anchor, 1])
        elif isinstance(e, (ev.SequenceEndEvent, ev.MappingEndEvent)):
            anchor, n = stack.pop()
            if anchor is not None:
                sizes[anchor] = n
            add(n)
        elif isinstance(e, ev.ScalarEvent):
            if e.anchor is not None:
                sizes[e.anchor] = 1
            if e.implicit[0] and len(e.value) > MAX_INT_DIGITS and _yaml_int(e.value):
                line = e.start_mark.line + 1 if e.start_mark else "?"
                raise UserError(f"{origin} line {line}: an integer of {len(e.value)} digits (at most "
                                f"{MAX_INT_DIGITS} in a file of ours)", exit_code=2)
            add(1)
        elif isinstance(e, ev.AliasEvent):
            if e.anchor not in sizes:
                open_ = any(a == e.anchor for a, _ in stack)
                line = e.start_mark.line + 1 if e.start_mark else "?"
                why = "inside its own anchor (a recursive alias)" if open_ else "before any anchor of that name"
                raise UserError(f"{origin} line {line}: alias *{e.anchor} {why}", exit_code=2)
            add(sizes[e.anchor])


def _yaml_int(value: str) -> bool:
    """A plain scalar PyYAML would build as an int (decimal, 0x, 0o, 0b, 1_000, 1:20:30)."""
    import yaml

    return bool(yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))
                == "tag:yaml.org,2002:int")


def yaml_load(text: str, origin: str) -> Any:
    """``yaml.safe_load`` after ``check_yaml``: one UserError line for a bomb, a deep file or a
    number PyYAML cannot build (its own ValueError / OverflowError)."""
    import yaml

    check_yaml(text, origin)
    try:
        return yaml.safe_load(text)
    except (ValueError, OverflowError) as exc:  # yaml.YAMLError (a syntax error) is the caller's
        raise UserError(f"{origin}: a value this tool cannot read ({exc})", exit_code=2) from None


def yaml_file(path: str | Path, origin: str, limit: int = MAX_BYTES) -> Any:
    """A YAML file through the bounded read (regular file, at most ``limit``) and ``yaml_load``."""
    try:
        text = read_text(path, what="a YAML file", limit=limit)
    except Unreadable as exc:
        msg = str(exc)
        head = f"{path}: "
        raise UserError(f"{origin}: {msg[len(head):]}" if msg.startswith(head) else msg, exit_code=2) from None
    return yaml_load(text, origin)
