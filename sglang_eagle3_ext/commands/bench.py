"""`sgl-eagle3 bench`: streaming OpenAI chat benchmark; TTFT, decode tok/s, accept length per run."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from ..runtime.errors import UserError
from .console import clean, err, out, plain, print_json

HELP = ("Benchmark a running server: TTFT, decode and end-to-end tok/s, accept length (streaming); "
        "a concurrency ladder with --concurrency 1,2,4,...; open-loop traffic with --request-rate")

_OPEN_FLAGS = ("burstiness", "num_requests", "duration", "max_concurrency", "output_len", "seed",
               "order", "slo", "flush_cache")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--runs", type=int, default=None, help="measured runs (default 5; closed loop)")
    p.add_argument("--warmup", type=int, default=1,
                   help="discarded warm-up runs (default 1); open loop: warm-up requests per rate")
    p.add_argument("--max-tokens", type=int, default=1000, help="tokens per request (default 1000)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", help="prompt text (default: the Kimi-K2.5 campaign's B-tree-in-Rust request)")
    g.add_argument("--prompts", metavar="FILE",
                   help="prompts: one per line, a JSON list of strings, chat JSONL (messages) or "
                        "ShareGPT JSON; requests cycle through them")
    p.add_argument("--concurrency", default=None, metavar="N[,N...]",
                   help="requests in flight per run (default 1); a list (1,2,4,8,16,32,64) runs a "
                        "ladder, one bench per level")
    o = p.add_argument_group("open loop (docs/guide/bench.md, Open-loop traffic)")
    o.add_argument("--request-rate", metavar="R[,R...]",
                   help="requests per second, sent on a schedule whatever the server's pace (Poisson "
                        "arrivals); inf = all at once; a list runs one rate after the other")
    o.add_argument("--burstiness", type=float, default=None, metavar="K",
                   help="Gamma-distributed gaps, shape K, mean 1/R (vLLM's definition); 1 = Poisson "
                        "(default), < 1 burstier")
    g2 = o.add_mutually_exclusive_group()
    g2.add_argument("--num-requests", type=int, default=None, metavar="N",
                    help="requests per rate (default 100)")
    g2.add_argument("--duration", type=float, default=None, metavar="S",
                    help="per rate: every arrival in the first S seconds")
    o.add_argument("--max-concurrency", type=int, default=None, metavar="C",
                   help="at most C requests in flight; later arrivals wait for a slot")
    o.add_argument("--output-len", default=None, metavar="file|N|uniform:LO,HI|lognormal:MEDIAN,SIGMA",
                   help="answer length per request (default: the file's output_len when every prompt "
                        "has one, else --max-tokens; distributions are capped at --max-tokens)")
    o.add_argument("--seed", type=int, default=None, metavar="S",
                   help="arrivals, order and drawn lengths (default 42, SGLang bench_serving's): the "
                        "same seed replays the same traffic")
    o.add_argument("--order", choices=("shuffle", "file"), default=None,
                   help="prompt order: shuffle (default; bench_serving's ShareGPT order) or file")
    o.add_argument("--flush-cache", action="store_true", default=None,
                   help="after each rate's warm-up, drop the server's radix cache (SGLang's "
                        "/flush_cache, as bench_serving --flush-cache): a replayed traffic file then "
                        "prefills from scratch, not from an earlier run's prefixes")
    o.add_argument("--slo", metavar="ttft=MS,tpot=MS,itl=MS,e2el=MS",
                   help="goodput: the requests that met every SLO given (itl: the request's longest "
                        "inter-token latency)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds one request may take before it counts as failed (default 600)")
    p.add_argument("--label", help="config name shown by `compare` (default: the URL)")
    p.add_argument("--model", help="model name to send (default: first id of /v1/models)")
    p.add_argument("--api", choices=("chat", "generate"), default="chat",
                   help="chat: /v1/chat/completions (default; the server applies the chat template); "
                        "generate: SGLang's native /generate with each prompt's text as it is, what "
                        "bench_serving's --backend sglang sends (docs/guide/bench.md, The twin)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="always generate --max-tokens tokens (SGLang/vLLM extension)")
    p.add_argument("--out", metavar="FILE.json", help="write the result document here")
    p.add_argument("--plot", metavar="FILE.png",
                   help="a ladder: per-stream and total tok/s against concurrency; open loop: TTFT / ITL / TPOT "
                        "p50, p99 and goodput against the request rate (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")


def check_out(path: str | None) -> None:
    """--out: a file we can write (outputs.check_destination), checked before any run; an empty
    path (an unset variable) is refused, not a run whose result goes nowhere."""
    if path is None:
        return
    if not path.strip():
        raise UserError("--out: an empty path; give a file name such as result.json", exit_code=2)
    from ..documents.outputs import check_destination

    check_destination(path)


PLOT_FORMATS = (".png",)  # plot_base.save writes PNG


def check_plot(args: argparse.Namespace, drawn: bool) -> None:
    """--plot before any run: a ladder or an open loop, a .png name (a name without an extension
    gets .png: the name reported is the file written), a place we can write, matplotlib."""
    if args.plot is None:
        return
    from pathlib import Path

    from ..documents.outputs import check_destination

    if not drawn:
        raise UserError("--plot draws a concurrency ladder (--concurrency 1,2,4,...) or an open loop "
                        "(--request-rate); one concurrency level has nothing to plot", exit_code=2)
    if not args.plot.strip():
        raise UserError("--plot: an empty path; give a file name such as plot.png", exit_code=2)
    suffix = Path(args.plot).suffix.lower()
    if not suffix:
        check_destination(args.plot, "--plot")  # /dev/null: refused as it is, not made /dev/null.png
        args.plot += ".png"
    elif suffix not in PLOT_FORMATS:
        raise UserError(f"--plot {args.plot}: give a .png file name (the plot is a PNG image, "
                        f"not {suffix})", exit_code=2)
    if args.out and _same_file(args.out, args.plot):
        raise UserError(f"--plot {args.plot}: the same file as --out", exit_code=2)
    check_destination(args.plot, "--plot")
    args.plot = str(Path(args.plot).expanduser())  # what was checked is what is written
    from ..measure.plot_base import missing_reason

    why = missing_reason()
    if why:  # one line now, not after the run
        raise UserError(f"--plot: {why} (or leave --plot out)", exit_code=2)


def options_from_args(args: argparse.Namespace) -> Any:
    from ..measure.bench import DEFAULT_PROMPT, BenchOptions, parse_levels
    from ..measure.prompts import load_prompts

    given = [f"--{k.replace('_', '-')}" for k in _OPEN_FLAGS if getattr(args, k, None) is not None]
    if given:
        raise UserError(f"{', '.join(given)}: open-loop flags; give --request-rate too", exit_code=2)
    levels = parse_levels(args.concurrency or "1")
    prompts = load_prompts(args.prompts) if args.prompts else [args.prompt or DEFAULT_PROMPT]
    check_api(args.api, prompts)
    return BenchOptions(url=args.url, runs=5 if args.runs is None else args.runs, warmup=args.warmup,
                        max_tokens=args.max_tokens, prompts=prompts,
                        concurrency=levels[0], label=args.label, model=args.model,
                        ignore_eos=args.ignore_eos, timeout_s=args.timeout, api=args.api), levels


def check_api(api: str, prompts: list[Any]) -> None:
    """--api generate sends text: a conversation of several messages has none (UserError 2)."""
    from ..measure.prompts import text_of

    if api != "generate":
        return
    for i, p in enumerate(prompts):
        if text_of(p) is None:
            raise UserError(f"--api generate sends each prompt as one text: prompt {i + 1} is a conversation "
                            f"of {len(p)} messages (the chat API, the default, takes it)", exit_code=2)


@contextlib.contextmanager
def progress_bar() -> Iterator[Any]:
    """A transient progress bar on stderr (stdout stays clean for --json). Its refresh thread may
    not start at a thread or task limit: then no bar, and the bench goes on."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    prog = Progress(*cols, console=err, transient=True)
    try:
        prog.start()
    except RuntimeError:  # "can't start new thread"
        prog.stop()
        prog = Progress(*cols, console=err, transient=True, auto_refresh=False, disable=True)
    try:
        yield prog
    finally:
        prog.stop()


def run_with_progress(opts: Any, levels: list[int] | None = None) -> dict[str, Any]:
    """run_bench (or run_ladder) behind a rich progress bar on stderr (stdout stays clean for --json)."""
    from ..measure.bench import run_bench, run_ladder

    per = opts.warmup + opts.runs
    with progress_bar() as prog:
        task = prog.add_task("bench", total=per * len(levels or [1]))

        def cb(phase: str, i: int, total: int, level: int | None = None) -> None:
            label = {"warmup": "warm-up", "run": "run", "done": "done"}[phase]
            shown = i + 1 - opts.warmup if phase == "run" else i + 1
            done = (levels.index(level) * per if levels and level is not None else 0) + i
            where = f"concurrency {level}: " if level is not None else ""
            prog.update(task, completed=done, description=f"{where}{label} {min(shown, total)}")

        if levels and len(levels) > 1:
            return run_ladder(opts, levels, progress=lambda n, ph, i, t: cb(ph, i, t, n), keep_partial=True)
        return run_bench(opts, progress=cb, keep_partial=True)


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render(result: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=plain(f"bench: {result['label']}  ({result['model']})"), title_justify="left")
    for col in ("run", "tokens", "TTFT ms", "decode tok/s", "e2e tok/s", "accept len", "source"):
        t.add_column(col, justify="right" if col != "source" else "left")
    for r in result["runs"]:
        bad = [q["error"] for q in r["requests"] if q["error"]]
        t.add_row(str(r["index"] - result["params"]["warmup"] + 1), str(r["completion_tokens"]),
                  _f(r["ttft_s"] and r["ttft_s"] * 1000), _f(r["decode_tok_s"]), _f(r["e2e_tok_s"]),
                  _f(r["accept_length"], "{:.2f}"), plain(r["accept_source"] if not bad else f"error: {bad[0]}"))
    out.print(t)
    s = result["summary"]
    d, e = s["decode_tok_s"], s["e2e_tok_s"]
    out.print(f"decode tok/s  avg {_f(d['avg'])}  median {_f(d['median'])}  peak {_f(d['peak'])}")
    out.print(f"e2e tok/s     avg {_f(e['avg'])}  median {_f(e['median'])}  peak {_f(e['peak'])}")
    out.print(f"TTFT ms       avg {_f(s['ttft_s']['avg'] and s['ttft_s']['avg'] * 1000)}")
    al = s["accept_length"]
    src = {"sglext": "per request, sglext.spec_tokens_details", "meta_info": "per request, meta_info.spec_verify_ct",
           "metrics": "Prometheus counter differences", "none": "not reported by the server"}
    out.print(f"accept length {_f(al, '{:.2f}')} (incl. bonus; source: "
              f"{src.get(s['accept_source'], s['accept_source'])})")
    if s["failed_requests"]:
        out.print(f"[red]{s['failed_requests']} request(s) failed[/]: ", end="")
        out.print(clean(result["errors"][0]), markup=False, highlight=False)
    for w in result.get("warnings") or []:
        err.print(f"warning: {clean(w)}", markup=False, highlight=False)


def render_ladder(doc: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=plain(f"ladder: {doc['label']}  ({doc['model']}); per stream = decode tok/s of one "
                          f"request, accept len incl. bonus"), title_justify="left")
    for col in ("concurrency", "per stream tok/s", "total tok/s", "TTFT ms", "accept len", "ok runs",
                "failed"):
        t.add_column(col, justify="right")
    for lv in doc["levels"]:
        s = lv["summary"]
        t.add_row(str(s["concurrency"]), _f(s["per_stream_tok_s"]), _f(s["throughput_tok_s"]),
                  _f(s["ttft_s"] and s["ttft_s"] * 1000), _f(s["accept_length"], "{:.2f}"),
                  f"{s['ok_runs']}/{doc['params']['runs']}", str(s["failed_requests"]))
    out.print(t)
    for lv in doc["levels"]:
        errs = lv["bench"]["errors"]
        if errs:
            out.print(f"[red]concurrency {lv['concurrency']}: {len(errs)} failed request(s)[/]: ", end="")
            out.print(clean(errs[0]), markup=False, highlight=False)
        for w in lv["bench"].get("warnings") or []:
            err.print(f"warning: concurrency {lv['concurrency']}: {clean(w)}", markup=False, highlight=False)


def interrupted(exc: KeyboardInterrupt) -> int:
    """Nothing finished: one line, 128 + the signal (130 for Ctrl-C)."""
    import signal

    from ..measure import stopping

    sig = stopping.signal_of(exc)
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    err.print(f"bench interrupted ({name}): open streams closed, nothing written",
              highlight=False, markup=False)
    return 128 + sig


def say_stopped(args: argparse.Namespace, doc: dict[str, Any], kept: str, written: bool = True) -> int:
    """A run stopped early with something finished: what was kept, where, and why it stopped
    (said even when --out could not be written: the result is on stdout then)."""
    from ..measure import stopping

    st = doc["stopped"]
    where = f"; written to {args.out}" if args.out and written else (
        "; printed above, --out not written" if args.out else "")
    err.print(f"bench stopped: {clean(st['reason'])}; kept {kept}{where}", highlight=False, markup=False)
    return stopping.exit_code(st)


def run(args: argparse.Namespace) -> int:
    from ..measure.stopping import signals_as_interrupts

    check_out(args.out)
    if args.out and args.prompts and _same_file(args.out, args.prompts):
        raise UserError(f"--out {args.out}: the --prompts file; the result would overwrite it: give another "
                        "name", exit_code=2)
    with signals_as_interrupts():
        try:
            if args.request_rate is not None:
                return run_open(args)
            return run_closed(args)
        except KeyboardInterrupt as exc:  # before the run (a big prompt file being read): 128 + signal
            return interrupted(exc)


def _same_file(a: str, b: str) -> bool:
    from pathlib import Path

    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def run_closed(args: argparse.Namespace) -> int:
    if args.runs is None:
        args.runs = 5
    opts, levels = options_from_args(args)
    ladder = len(levels) > 1
    check_plot(args, ladder)
    try:
        result = run_with_progress(opts, levels)
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    written = emit(args, result, render_ladder if ladder else render)
    if result.get("stopped"):
        kept = ("concurrency " + ", ".join(str(lv["concurrency"]) for lv in result["levels"]) if ladder
                else f"{len(result['runs'])} of {args.runs} runs")
        if ladder and args.plot and written:
            from ..measure.plot import plot_ladders

            draw(lambda: plot_ladders([result], args.plot))
        return say_stopped(args, result, kept, written)
    if not written:
        return 1
    if ladder:
        if args.plot:
            from ..measure.plot import plot_ladders

            draw(lambda: plot_ladders([result], args.plot))
        ok = all(lv["summary"]["ok_runs"] == args.runs and not lv["summary"]["failed_requests"]
                 for lv in result["levels"])
        return 0 if ok else 1
    s = result["summary"]
    return 0 if s["ok_runs"] == args.runs and not s["failed_requests"] else 1


def draw(plot: Any) -> None:
    """Draw the plot checked before the run (check_plot); a failure now is one line."""
    try:
        out.print(f"wrote {plot()}", highlight=False, markup=False)
    except UserError as exc:
        err.print(f"plot skipped: {exc}", highlight=False, markup=False)
    except (OSError, ValueError, RuntimeError) as exc:  # the disk filled, a device went away
        err.print(f"plot skipped: {type(exc).__name__}: {exc}", highlight=False, markup=False)


def emit(args: argparse.Namespace, doc: dict[str, Any], show: Any) -> bool:
    """The document as JSON or a table, then to --out (checked before the runs; if writing still
    fails, the document is on stdout already). False when --out could not be written."""
    import json

    from ..documents.outputs import write_atomic, write_result

    if args.json:
        print_json(doc)
    else:
        show(doc)
    if not args.out:
        return True
    text = json.dumps(doc, indent=2, default=str) + "\n"
    if not args.json:
        if not write_result(args.out, text):
            return False
        out.print(f"wrote {args.out}", highlight=False, markup=False)
        return True
    try:
        write_atomic(args.out, text)
    except UserError as exc:
        err.print(f"error: {exc}; the result is printed above", highlight=False, markup=False)
        return False
    return True


# ---------------------------------------------------------------- open loop


def open_options(args: argparse.Namespace) -> Any:
    """OpenLoopOptions from the flags; UserError(2) for a bad value (before anything is sent)."""
    from ..measure import arrivals, open_loop, serving_stats
    from ..measure.bench import DEFAULT_PROMPT
    from ..measure.prompts import PromptItem, load_items

    if args.concurrency is not None or args.runs is not None:
        raise UserError("--concurrency / --runs are closed-loop flags; with --request-rate cap the "
                        "requests in flight with --max-concurrency", exit_code=2)
    rates = arrivals.parse_rates(args.request_rate)
    items = load_items(args.prompts) if args.prompts else [PromptItem(args.prompt or DEFAULT_PROMPT)]
    check_api(args.api, [it.prompt for it in items])
    dist = arrivals.parse_lengths(args.output_len, "--output-len", allow_file=True) \
        if args.output_len is not None else None
    opts = open_loop.OpenLoopOptions(
        url=args.url, rates=rates, items=items,
        burstiness=1.0 if args.burstiness is None else args.burstiness,
        num_requests=None if args.duration is not None else (
            100 if args.num_requests is None else args.num_requests),
        duration_s=args.duration, max_concurrency=args.max_concurrency, output_len=dist,
        max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
        seed=42 if args.seed is None else args.seed, order=args.order or "shuffle",
        slo=serving_stats.parse_slo(args.slo), warmup=args.warmup, flush_cache=bool(args.flush_cache),
        timeout_s=args.timeout, api=args.api,
        label=args.label, model=args.model, prompts_file=args.prompts)
    open_loop.check(opts)
    return opts


def run_open_with_progress(opts: Any) -> dict[str, Any]:
    from ..documents.serving_doc import rate_label
    from ..measure.open_loop import rate_json, run_open_loop

    with progress_bar() as prog:
        task = prog.add_task("open loop", total=None)

        def cb(i: int, k: int, n: int) -> None:
            prog.update(task, completed=k, total=n,
                        description=f"rate {rate_label(rate_json(opts.rates[i]))}/s: sent")

        return run_open_loop(opts, progress=cb)


def _pair(st: dict[str, Any] | None, a: str = "p50", b: str = "p99") -> str:
    st = st or {}
    return f"{_f(st.get(a))} / {_f(st.get(b))}"


def render_open(doc: dict[str, Any]) -> None:
    from rich.table import Table

    from ..documents.serving_doc import rate_label

    p = doc["params"]
    arr = "all at once" if p["request_rates"] == ["inf"] else (
        "Poisson arrivals" if p["burstiness"] == 1 else f"Gamma arrivals, burstiness {p['burstiness']:g}")
    cap = f", at most {p['max_concurrency']} in flight" if p.get("max_concurrency") else ""
    t = Table(title=plain(f"open loop: {doc['label']}  ({doc['model']}); {arr}{cap}, seed {p['seed']}; "
                          "latencies p50 / p99 ms; accept len incl. bonus"), title_justify="left")
    slo = p.get("slo_ms")
    cols = ["rate /s", "ok/sent", "req/s", "out tok/s", "TTFT", "ITL", "TPOT", "E2E"]
    if slo:
        cols.append("goodput req/s (met)")
    cols += ["accept len", "late max ms"]
    for c in cols:
        t.add_column(c, justify="right")
    for e in doc["rates"]:
        s = e["summary"]
        row = [rate_label(e["request_rate"]), f"{s['completed']}/{s['sent']}", _f(s["request_throughput"], "{:.2f}"),
               _f(s["output_throughput"]), _pair(s["ttft_ms"]), _pair(s["itl_ms"], "p50", "p99"),
               _pair(s["tpot_ms"]), _pair(s["e2e_latency_ms"])]
        if slo:
            g = s.get("goodput") or {}
            att = g.get("slo_attainment")
            row.append(f"{_f(g.get('request_goodput'), '{:.2f}')} ({'-' if att is None else f'{100 * att:.0f}%'})")
        row += [_f(s["accept_length"], "{:.2f}"), _f((e.get("schedule") or {}).get("late_max_ms"))]
        t.add_row(*row)
    out.print(t)
    if slo:
        out.print("goodput: requests that met every SLO (" + ", ".join(f"{k} <= {v:g} ms" for k, v in slo.items())
                  + ") per second; met = their share of requests sent", highlight=False)
    for e in doc["rates"]:
        s, lab = e["summary"], rate_label(e["request_rate"])
        if s.get("expected_accept_len"):
            exp = ", ".join(f"{k}: {v:.3f}" for k, v in s["expected_accept_len"].items())
            out.print(f"rate {lab}/s: accept length {_f(s['accept_length'], '{:.3f}')} "
                      f"({s['accept_source']}); the requests' own expectation pooled, per steps / key: {exp}",
                      highlight=False)
        if e["errors"]:
            out.print(f"[red]rate {lab}/s: {s['failed']} request(s) failed[/]: ", end="")
            out.print(clean(e["errors"][0]), markup=False, highlight=False)
        for w in e.get("warnings") or []:
            err.print(f"warning: {clean(w)}", markup=False, highlight=False)


def run_open(args: argparse.Namespace) -> int:
    from ..documents.serving_doc import rate_label

    opts = open_options(args)
    check_plot(args, True)
    try:
        doc = run_open_with_progress(opts)
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    written = emit(args, doc, render_open)
    if args.plot and written:
        from ..measure.plot import plot_serving

        draw(lambda: plot_serving([doc], args.plot))
    if doc.get("stopped"):
        return say_stopped(args, doc, "rate " + ", ".join(f"{rate_label(e['request_rate'])}/s"
                                                           for e in doc["rates"]), written)
    if not written:
        return 1
    ran = len(doc["rates"]) == len(opts.rates)
    return 0 if ran and not any(e["summary"]["failed"] for e in doc["rates"]) else 1
