"""SGLang's and bench_serving's spellings of our options, accepted where ours differ.

One table, applied to every command's parser after its ``add_arguments``: each SGLang name becomes
one more option string of our existing argparse action (so ``--speculative-num-steps 3`` and
``--steps 3`` are the same option, and ``--help`` shows both). An SGLang or bench_serving name we do
not take gets one line naming our equivalent, or saying why there is none, instead of argparse's
bare "unrecognized arguments". ``--dry-run`` is the one word for "show the plan, start nothing"
in every command; ``--plan`` is kept as its other spelling.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from functools import lru_cache

# command -> our option -> the other spellings it also answers to. The first name of an entry
# marked in LEADS is shown first in --help (sweep's --plan becomes --dry-run, --plan).
SERVER_NAMES = {
    "--model": ("--model-path",),
    "--draft": ("--speculative-draft-model-path", "--speculative-draft-model"),
    "--tp": ("--tp-size", "--tensor-parallel-size"),
}
ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "launch": {
        **SERVER_NAMES,
        "--algorithm": ("--speculative-algorithm",),
        "--steps": ("--speculative-num-steps",),
        "--topk": ("--speculative-eagle-topk",),
        "--draft-tokens": ("--speculative-num-draft-tokens",),
        "--adaptive": ("--speculative-adaptive-config",),
        "--dist-init-addr": ("--nccl-init-addr",),
        "--dry-run": ("--plan",),
    },
    "scan": {**SERVER_NAMES, "--dry-run": ("--plan",)},
    "demo": {"--steps": ("--speculative-num-steps",), "--dry-run": ("--plan",)},
    "layers check": {"--target": ("--model-path",),
                     "--draft": ("--speculative-draft-model-path", "--speculative-draft-model")},
    "bench": {  # bench_serving (python -m sglang.bench_serving / sglang.benchmark.serving)
        "--url": ("--base-url",),
        "--num-requests": ("--num-prompts",),
        "--out": ("--output-file",),
        "--prompts": ("--dataset-path",),
        "--warmup": ("--warmup-requests",),
        "--output-len": ("--sharegpt-output-len",),
        "--model": ("--served-model-name",),
    },
    "sweep": {"--plan": ("--dry-run",)},
    "patch apply": {"--dry-run": ("--plan",)},
}
LEADS = {("sweep", "--plan")}  # the alias goes first: --dry-run is the common word

_SLO = "--slo ttft=MS,tpot=MS,itl=MS,e2el=MS (bench_serving: --goodput ttft:MS tpot:MS e2el:MS)"
_RANDOM = ("bench has no random data set: `sgl-eagle3 traffic` writes a prompt file with the prompt and "
           "answer lengths you choose, and --output-len N|uniform:LO,HI|lognormal:MEDIAN,SIGMA sets answer lengths")
_AFTER_DASHES = ("is SGLang's own flag, not one of ours: give it after `--` ({cmd} [PRESET] [OPTIONS] -- {flag} ...); "
                 "everything after `--` goes to SGLang unchanged")

# Names of the other tools that we take in another form, or not at all, and why.
EXPLAIN: dict[str, dict[str, str]] = {
    "bench": {
        "--backend": "bench_serving's --backend sglang is --api generate here (SGLang's native /generate); "
                     "sglang-oai-chat / the OpenAI chat API is --api chat (the default)",
        "--host": "give the whole address: --url http://HOST:PORT (bench_serving's --base-url)",
        "--port": "give the whole address: --url http://HOST:PORT (bench_serving's --base-url)",
        "--dataset-name": "bench reads a prompt file, not a named data set: --prompts FILE (one prompt a line, a "
                          "JSON list, chat JSONL or ShareGPT JSON); `sgl-eagle3 traffic` writes one",
        "--random-input-len": _RANDOM,
        "--random-output-len": _RANDOM,
        "--random-range-ratio": _RANDOM,
        "--goodput": f"goodput is {_SLO}",
        "--disable-ignore-eos": "bench stops at EOS unless --ignore-eos is given (bench_serving ignores EOS "
                                "unless --disable-ignore-eos): leave --ignore-eos out",
        "--disable-stream": "bench always streams: TTFT, inter-token times and decode tok/s need the stream",
        "--tokenizer": "bench needs no tokenizer: token counts come from the server's own usage / meta_info",
        "--temperature": "bench decodes greedily (temperature 0), the setting acceptance is measured at",
        "--profile": "SGLang's torch profiler is not driven from bench; our phase probes are "
                     "`sgl-eagle3 launch --profile` (docs/guide/profiling.md)",
        "--apply-chat-template": "--api chat (the default) has the server apply the chat template; --api "
                                 "generate sends each prompt's text as it is",
    },
    "launch": {
        "--speculative-adaptive": "give the tiers with --adaptive FILE (SGLang's --speculative-adaptive-config; "
                                  "--speculative-adaptive is then set) or --policy SCAN_RESULT",
    },
    "scan": {
        "--speculative-num-steps": "scan holds several step counts in turn: --steps LIST (a range 1-5 or a list "
                                   "1,2,3)",
        "--speculative-eagle-topk": "scan measures chains (topk 1), the only shape SGLang's adaptive states "
                                    "support; a tree is measured with `sweep` (matrix.trees)",
        "--speculative-num-draft-tokens": "scan sets the draft tokens of every held step count (steps + 1 at "
                                          "topk 1); none to give",
        "--speculative-algorithm": "scan runs EAGLE3 (its own --speculative-algorithm)",
        "--speculative-adaptive": "scan writes and sets its own adaptive config (one tier of the --steps "
                                  "candidates)",
        "--speculative-adaptive-config": "scan writes and sets its own adaptive config (one tier of the --steps "
                                         "candidates); `launch --adaptive FILE` takes yours",
    },
    "demo": {
        "--model-path": "demo builds and runs its own tiny models (--models DIR reuses a build); for your own "
                        "model use `sgl-eagle3 launch --model PATH --draft PATH` or `sgl-eagle3 scan`",
        "--speculative-draft-model-path": "demo builds its own draft; for your own models use `sgl-eagle3 "
                                          "launch` or `sgl-eagle3 scan` with --model and --draft",
    },
}
_IN_FILE = "a sweep takes its {what} from its file: {where} (docs/guide/sweep.md)"
EXPLAIN["sweep"] = {
    "--model-path": _IN_FILE.format(what="model", where="`preset:` or `launch: {model: PATH, draft: PATH}`"),
    "--speculative-draft-model-path": _IN_FILE.format(what="draft", where="`launch: {draft: PATH}`"),
    "--speculative-num-steps": _IN_FILE.format(what="step counts", where="`matrix: {steps: [1, 2, 3]}`"),
    "--speculative-eagle-topk": _IN_FILE.format(what="topk values", where="`matrix: {topk: [1, 4]}`"),
    "--speculative-num-draft-tokens": _IN_FILE.format(what="draft tokens", where="`matrix: {draft_tokens: [...]}`"),
    "--tp-size": _IN_FILE.format(what="tensor parallel size", where="`launch: {tp: N}`"),
}
# In these commands an unknown SGLang server flag is meant for SGLang: say how to pass it.
SERVER_COMMANDS = {"launch": _AFTER_DASHES, "scan": _AFTER_DASHES,
                   "demo": "is SGLang's own flag: give SGLang's flags in --server-args '{flag} ...'",
                   "sweep": "is SGLang's own flag: a sweep gives SGLang's flags from its file, `launch: {{extra_args: "
                            "[{flag}, ...]}}` (docs/guide/sweep.md)"}


def add_aliases(parser: argparse.ArgumentParser, command: str) -> None:
    """Give each action of ``parser`` (and of its sub-commands, ``patch apply``) the other
    spellings of ALIASES; remember the command for ``explain_unknown``. A name the parser
    already has is left alone (tests/test_flag_names.py checks every entry lands)."""
    parser.set_defaults(_flag_scope=command)
    parser.error = _Stop.raiser(parser, command)  # type: ignore[method-assign]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                add_aliases(sub, f"{command} {name}")
    for ours, theirs in ALIASES.get(command, {}).items():
        action = parser._option_string_actions.get(ours)
        if action is None:
            continue
        for name in theirs:
            if name in parser._option_string_actions:
                continue
            parser._option_string_actions[name] = action
            if (command, ours) in LEADS:
                action.option_strings.insert(0, name)
            else:
                action.option_strings.append(name)


def names_of(command: str) -> dict[str, str]:
    """Every other spelling this command takes -> our option (docs and tests read this)."""
    return {t: ours for ours, theirs in ALIASES.get(command, {}).items() for t in theirs}


def _flag(word: str) -> str | None:
    if not word.startswith("--") or word == "--":
        return None
    return word.split("=", 1)[0]


@lru_cache(maxsize=4)
def _release_flags(kind: str) -> frozenset[str]:
    """SGLang's server flags ("server") or bench_serving's ("bench") as the installed release
    spells them, read from its sources (never imported: 8-16 s, and it may not import at all).
    Empty when no SGLang is found: the explicit table still answers."""
    from ..runtime.sglang_env import locate

    try:
        pkg = locate(None).package_dir
    except Exception:  # noqa: BLE001 - no SGLang here: only our table answers
        return frozenset()
    if kind == "bench":
        files = [pkg / "benchmark" / "serving.py", pkg / "bench_serving.py"]
    else:
        files = [pkg / "srt" / "server_args.py", *sorted((pkg / "srt" / "arg_groups").glob("**/*.py"))]
    names: set[str] = set()
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        names.update(re.findall(r"[\"'](--[a-z][a-z0-9-]+)[\"']", text))
        if "arg_groups" in f.parts:  # 0.5.2x: a field `mem_fraction_static: A[...]` is --mem-fraction-static
            names.update("--" + m.replace("_", "-") for m in re.findall(r"^    ([a-z][a-z0-9_]*)\s*:\s*A\[", text, re.M))
    return frozenset(names)


def explain(command: str, flag: str) -> str | None:
    """One line for a name of SGLang or bench_serving that ``command`` does not take; None for a
    name neither tool has (argparse's own message then stands)."""
    top = command.split()[0]
    why = EXPLAIN.get(command, {}).get(flag)
    if why:
        return f"{flag}: {why}"
    if top in SERVER_COMMANDS and flag in _release_flags("server"):
        return f"{flag} " + SERVER_COMMANDS[top].format(cmd=f"sgl-eagle3 {top}", flag=flag)
    if top == "bench" and flag in _release_flags("bench"):
        return (f"{flag} is bench_serving's option; sgl-eagle3 bench has nothing like it "
                "(its options: sgl-eagle3 bench --help; bench_serving's names it takes: docs/guide/launch.md)")
    return None


def explain_unknown(command: str, words: Iterable[str]) -> str | None:
    """One line for the unrecognised words of a command line, when at least one of them is a
    name of SGLang or bench_serving; None otherwise."""
    flags = [f for f in (_flag(w) for w in words) if f]
    lines = [e for e in (explain(command, f) for f in dict.fromkeys(flags)) if e]
    if not lines:
        return None
    rest = [f for f in flags if not explain(command, f)]
    return "; ".join(lines) + (f" (also not an option here: {' '.join(rest)})" if rest else "")


class _Stop(Exception):
    """argparse's error in a parser we gave aliases: held until we know whether an SGLang name
    explains it (``bench --host H --port P`` first fails on the missing --url)."""

    def __init__(self, parser: argparse.ArgumentParser, scope: str, message: str) -> None:
        super().__init__(message)
        self.parser, self.scope, self.message = parser, scope, message

    holding = 0  # inside parse_args below; elsewhere (a bare parser.parse_args) argparse's own error

    @staticmethod
    def raiser(parser: argparse.ArgumentParser, scope: str):  # noqa: ANN205
        def error(message: str):  # noqa: ANN202
            if not _Stop.holding:
                argparse.ArgumentParser.error(parser, message)
            raise _Stop(parser, scope, message)
        return error


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None,
               namespace: argparse.Namespace | None = None) -> argparse.Namespace:
    """``parser.parse_args`` that answers an SGLang / bench_serving name with its line (exit 2)
    before argparse's own errors ("unrecognized arguments", "required: --url")."""
    import sys

    from ..runtime.errors import UserError

    words = list(sys.argv[1:] if argv is None else argv)
    _Stop.holding += 1
    try:
        args, unknown = parser.parse_known_args(words, namespace)
    except _Stop as stop:
        mine = stop.parser._option_string_actions
        given = words[:words.index("--")] if "--" in words else words
        line = explain_unknown(stop.scope, [w for w in given if _flag(w) and _flag(w) not in mine])
        if line:
            raise UserError(line, exit_code=2) from None
        argparse.ArgumentParser.error(stop.parser, stop.message)
    finally:
        _Stop.holding -= 1
    if unknown:
        line = explain_unknown(getattr(args, "_flag_scope", "") or "", unknown)
        if line:
            raise UserError(line, exit_code=2)
        argparse.ArgumentParser.error(parser, f"unrecognized arguments: {' '.join(unknown)}")
    return args
