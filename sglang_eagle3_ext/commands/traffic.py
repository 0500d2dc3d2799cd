"""`sgl-eagle3 traffic`: a ShareGPT prompt file for open-loop benches of a tiny build: varied
prompt lengths, a long-tailed answer mix, each request's expected accept length."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .console import out, print_json

HELP = ("Write open-loop traffic for a tiny build (--paths / --regions): ShareGPT JSON, varied "
        "prompt and answer lengths, each request's expected accept length")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--build", required=True, metavar="DIR",
                   help="a `sgl-eagle3 tiny --out DIR` folder built with --acceptance P (and --paths N "
                        "or --regions ...: requests whose acceptance differs)")
    p.add_argument("--out", required=True, metavar="FILE.json", help="the ShareGPT JSON file to write")
    p.add_argument("--requests", type=int, default=200, help="requests in the file (default 200)")
    p.add_argument("--seed", type=int, default=0, help="lengths, words and filler (default 0)")
    p.add_argument("--prompt-len", default="lognormal:300,1.0", metavar="N|uniform:LO,HI|lognormal:MEDIAN,SIGMA",
                   help="prompt tokens (default lognormal:300,1.0: tens to thousands)")
    p.add_argument("--output-len", default="lognormal:150,0.9", metavar="N|uniform:LO,HI|lognormal:MEDIAN,SIGMA",
                   help="answer tokens (default lognormal:150,0.9: a long tail)")
    p.add_argument("--max-prompt-len", type=int, default=3000, metavar="N", help="cap (default 3000)")
    p.add_argument("--max-output-len", type=int, default=1024, metavar="N", help="cap (default 1024)")
    p.add_argument("--json", action="store_true", help="print the file's summary as JSON")


def run(args: argparse.Namespace) -> int:
    from ..documents.outputs import check_destination, write_atomic
    from ..measure.arrivals import parse_lengths
    from ..tiny import traffic

    check_destination(args.out)
    check_not_in_build(args.out, args.build)
    pl = parse_lengths(args.prompt_len, "--prompt-len")
    ol = parse_lengths(args.output_len, "--output-len")
    items, summary = traffic.generate(args.build, args.requests, args.seed, pl, ol, args.max_prompt_len,
                                      args.max_output_len)
    write_atomic(args.out, json.dumps(items, indent=1) + "\n")
    summary["file"] = args.out
    if args.json:
        print_json(summary)
    else:
        render(summary)
    return 0


def check_not_in_build(out_path: str, build: str) -> None:
    """--out must not overwrite a file of the build it reads (tiny.json, maps.json, the prompts
    file, the model folders); another file in the build folder is fine (symlinks resolved)."""
    from pathlib import Path

    from ..runtime.errors import UserError
    from ..tiny.paths import PROMPTS_FILE

    dest = Path(out_path).expanduser().resolve()
    root = Path(build).expanduser().resolve()
    if not dest.is_relative_to(root):
        return
    rel = dest.relative_to(root)
    if len(rel.parts) > 1 or rel.name in ("tiny.json", "maps.json", PROMPTS_FILE):
        raise UserError(f"--out {out_path}: part of the build --build {build} ({rel}); the traffic file "
                        "would overwrite it: give another name", exit_code=2)


def _q(d: dict[str, Any]) -> str:
    return f"min {d['min']}, p50 {d['p50']:g}, p90 {d['p90']:g}, p99 {d['p99']:g}, max {d['max']}"


def render(s: dict[str, Any]) -> None:
    say = lambda t: out.print(t, highlight=False, markup=False)  # noqa: E731
    say(f"wrote {s['file']}: {s['requests']} requests ({s['kind']} build), ShareGPT JSON")
    say(f"  prompt tokens: {_q(s['prompt_len'])}")
    say(f"  answer tokens: {_q(s['output_len'])}")
    say("  requests per final word: " + ", ".join(f"{k} {v}" for k, v in s["by_word"].items()))
    keys = list(s["expected_accept_len"])
    label = "steps" if keys and keys[0].isdigit() else "key"
    say(f"  expected accept length (incl. bonus), pooled over the file [per-request range], per {label}:")
    for k in keys:
        lo, hi = s["expected_range"][k]
        say(f"    {k}: {s['expected_accept_len'][k]:.3f} [{lo:.2f}, {hi:.2f}]")
    say(f"  bench it: sgl-eagle3 bench --url URL --prompts {s['file']} --request-rate 1,4,16 --ignore-eos")


