"""`sgl-eagle3 bench`: streaming OpenAI chat benchmark; TTFT, decode tok/s, accept length per run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..console import err, out, print_json
from ..errors import UserError

HELP = "Benchmark a running server: TTFT, decode and end-to-end tok/s, accept length (streaming)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="discarded warm-up runs (default 1)")
    p.add_argument("--max-tokens", type=int, default=1000, help="tokens per request (default 1000)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", help="prompt text (default: the seeds' B-tree-in-Rust request)")
    g.add_argument("--prompts", metavar="FILE",
                   help="one prompt per line (or a JSON list); requests cycle through them")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight per run")
    p.add_argument("--label", help="config name shown by `compare` (default: the URL)")
    p.add_argument("--model", help="model name to send (default: first id of /v1/models)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="always generate --max-tokens tokens (SGLang/vLLM extension)")
    p.add_argument("--out", metavar="FILE.json", help="write the result document here")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")


def load_prompts(path: str) -> list[str]:
    import json

    p = Path(path)
    if not p.is_file():
        raise UserError(f"--prompts {path}: no such file", exit_code=2)
    text = p.read_text()
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"--prompts {path}: invalid JSON list ({exc})", exit_code=2) from exc
        prompts = [str(x) for x in data]
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise UserError(f"--prompts {path}: no prompts in the file", exit_code=2)
    return prompts


def options_from_args(args: argparse.Namespace) -> Any:
    from ..bench import DEFAULT_PROMPT, BenchOptions

    prompts = load_prompts(args.prompts) if args.prompts else [args.prompt or DEFAULT_PROMPT]
    return BenchOptions(url=args.url, runs=args.runs, warmup=args.warmup,
                        max_tokens=args.max_tokens, prompts=prompts,
                        concurrency=args.concurrency, label=args.label, model=args.model,
                        ignore_eos=args.ignore_eos)


def run_with_progress(opts: Any) -> dict[str, Any]:
    """run_bench behind a rich progress bar on stderr (stdout stays clean for --json)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench import run_bench

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as prog:
        task = prog.add_task("bench", total=opts.warmup + opts.runs)

        def cb(phase: str, i: int, total: int) -> None:
            label = {"warmup": "warm-up", "run": "run", "done": "done"}[phase]
            shown = i + 1 - opts.warmup if phase == "run" else i + 1
            prog.update(task, completed=i, description=f"{label} {min(shown, total)}")

        result = run_bench(opts, progress=cb)
    return result


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render(result: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=f"bench: {result['label']}  ({result['model']})", title_justify="left")
    for col in ("run", "tokens", "TTFT ms", "decode tok/s", "e2e tok/s", "accept len", "source"):
        t.add_column(col, justify="right" if col != "source" else "left")
    for r in result["runs"]:
        bad = [q["error"] for q in r["requests"] if q["error"]]
        t.add_row(str(r["index"] - result["params"]["warmup"] + 1), str(r["completion_tokens"]),
                  _f(r["ttft_s"] and r["ttft_s"] * 1000), _f(r["decode_tok_s"]), _f(r["e2e_tok_s"]),
                  _f(r["accept_length"], "{:.2f}"), r["accept_source"] if not bad else f"error: {bad[0]}")
    out.print(t)
    s = result["summary"]
    d, e = s["decode_tok_s"], s["e2e_tok_s"]
    out.print(f"decode tok/s  avg {_f(d['avg'])}  median {_f(d['median'])}  peak {_f(d['peak'])}")
    out.print(f"e2e tok/s     avg {_f(e['avg'])}  median {_f(e['median'])}  peak {_f(e['peak'])}")
    out.print(f"TTFT ms       avg {_f(s['ttft_s']['avg'] and s['ttft_s']['avg'] * 1000)}")
    al = s["accept_length"]
    src = {"sglext": "per request, sglext.spec_tokens_details",
           "metrics": "Prometheus counter differences", "none": "not reported by the server"}
    out.print(f"accept length {_f(al, '{:.2f}')} (incl. bonus; source: "
              f"{src.get(s['accept_source'], s['accept_source'])})")
    if s["failed_requests"]:
        out.print(f"[red]{s['failed_requests']} request(s) failed[/]: {result['errors'][0]}")


def run(args: argparse.Namespace) -> int:
    from ..bench import write_json

    opts = options_from_args(args)
    result = run_with_progress(opts)
    if args.out:
        write_json(args.out, result)
    if args.json:
        print_json(result)
    else:
        render(result)
        if args.out:
            out.print(f"wrote {args.out}")
    return 0 if result["summary"]["ok_runs"] == args.runs else 1
