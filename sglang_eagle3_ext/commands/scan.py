"""`sgl-eagle3 scan`: every candidate step count x every load in ONE server start (scan.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import PHASES
from . import split_preset_words
from .console import err, out

HELP = ("One server start: hold every candidate step count in turn (SGLang 0.5.13+ adaptive states) at "
        "every concurrency; per (steps, batch size) phases, acceptance and tok/s; best per tier; an "
        "adaptive config from the measurements.")

EPILOG = """\
Example (H200, llama3-8b shape):
  sgl-eagle3 scan llama3-8b --steps 0-5 --concurrency 1,8,32 --baseline --out scan-llama3 \\
      -- --max-running-requests 32 --cuda-graph-max-bs-decode 32
Figures are steady decode cycles of one key (steps, batch size); the interval is over hold blocks.
Everything after `--` goes to SGLang (replacing the preset's value of the same flag).
Step 0 is SGLang's 0-step state, not plain decoding: --baseline benches a plain server too.
Ctrl-C stops the server and keeps what was measured (scan.json says interrupted: true).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    _options(p)
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="[PRESET] [-- SGLANG_ARGS]",
                   help="a launch preset (launch/*.yaml) or YAML path, then `--` and extra SGLang args")


def _options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what to scan")
    g.add_argument("--model", metavar="PATH", help="target model folder (instead of / over the preset)")
    g.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft folder")
    g.add_argument("--tp", type=int, help="tensor parallel size")
    g.add_argument("--steps", dest="scan_steps", default="1-5", metavar="LIST",
                   help="candidate step counts: a range 0-5 or a list 1,2,3 (default 1-5; 0 = SGLang's "
                        "0-step state, 0.5.16+)")
    g.add_argument("--trees", metavar="SPEC",
                   help="trees held beside the chains in the same start (SGLang 0.5.16 / 0.5.23 structure, page "
                        "size 1): STEPSxTOPKxTOKENS@BS-BS, e.g. 5x4x21@1-16,3x4x8@1-4 (each held and measured "
                        "only at the batch sizes of its range)")
    g.add_argument("--precision", type=float, default=2.0, metavar="PCT",
                   help="per batch size, measure until the best state's interval is separated from the runner-up's, "
                        "or both are within +-PCT %% (a tie), or --time-limit (default 2)")
    g.add_argument("--concurrency", default="1,8,32", metavar="LIST",
                   help="concurrency ladder, one level after the other (default 1,8,32)")
    g.add_argument("--prompts", metavar="FILE", help="prompt file (text / JSON / JSONL / ShareGPT; see bench)")
    g.add_argument("--max-tokens", type=int, default=512, help="tokens per request (default 512)")
    g.add_argument("--block", type=int, default=32, metavar="N",
                   help="decode cycles per hold block (the schedule rotates candidates every N cycles "
                        "at a batch size; default 32)")
    g.add_argument("--min-cycles", type=int, default=256, metavar="N",
                   help="steady cycles each candidate needs at a level's batch size (default 256)")
    g.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="bench runs per level before counting (discarded; their windows do not count). "
                        "Give enough for the first level to visit every state once (default 1)")
    g.add_argument("--time-limit", type=float, default=300.0, metavar="S",
                   help="seconds per level at most, covered or not (default 300)")
    g.add_argument("--baseline", action="store_true",
                   help="also start a plain no-spec server after the scan and bench every level (the true "
                        "baseline; step 0 is not plain decoding)")
    g.add_argument("--baseline-runs", type=int, default=3, metavar="N", help="runs per level for --baseline")
    g.add_argument("--within", type=float, default=5.0, metavar="PCT",
                   help="adaptive config: candidates within PCT %% of a tier's best (default 5)")
    g.add_argument("--out", metavar="DIR", help="output folder (default scan-<preset or model>)")
    g.add_argument("--json", action="store_true", help="print scan.json instead of the tables")
    g.add_argument("--dry-run", action="store_true",
                   help="check everything, write the one-tier config, print the SGLang command and env and the "
                        "memory estimate; start nothing")
    q = p.add_argument_group("process")
    q.add_argument("--port", type=int, help="HTTP port (default the preset's, else 30000)")
    q.add_argument("--timeout", type=float, metavar="S", help="seconds to wait for health")
    q.add_argument("--profile-every", type=int, metavar="N", help="cycles per probe window (default 100)")
    q.add_argument("--python", metavar="EXE", help="Python that runs SGLang")
    q.add_argument("--grace", type=float, default=15.0, metavar="S",
                   help="seconds the server gets between SIGTERM and SIGKILL when the scan stops it (default 15)")
    q.add_argument("--server-module", help=argparse.SUPPRESS)  # stand-in servers in tests
    q.add_argument("--no-sglang-check", action="store_true",
                   help="skip SGLang's own argument check (a child Python)")


def _split_words(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    return split_preset_words(args, "sgl-eagle3 scan", _options)


def merge_extra(base: list[str], given: list[str]) -> list[str]:
    """The preset's extra SGLang args with every flag given after `--` replaced by the given one."""
    flags = {a.split("=", 1)[0] for a in given if a.startswith("--")}
    kept: list[str] = []
    skip = False
    for a in base:
        if skip and not a.startswith("--"):
            skip = False
            continue
        skip = False
        if a.startswith("--") and a.split("=", 1)[0] in flags:
            skip = "=" not in a
            continue
        kept.append(a)
    return kept + given


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the run needs, checked before anything starts."""
    from ..documents.jsonio import write_json
    from ..measure import bench
    from ..runtime.sglang_env import locate
    from ..serve import adaptive_format, flags, launch_config
    from ..tune import scan, scan_memory

    preset, given = _split_words(args)
    from ..serve.stepenv import command_notes, refuse_exported

    refuse_exported("scan")  # the scan sets the hold schedule for its own server only; POLICY would clash
    for note in command_notes("scan"):  # our NCCL / probe variables: not passed to its servers
        err.print(f"note: {note}", highlight=False, markup=False)
    env = locate(getattr(args, "sglang_root", None))
    loader, note = adaptive_format.hold_support(env)
    cands = scan.parse_steps(args.scan_steps)
    if 0 in cands and not loader.allows_zero:
        raise UserError(f"--steps {args.scan_steps}: SGLang {env.version} has no step 0 (its loader, "
                        f"{loader.source}, wants positive candidate steps; the 0-step state exists from "
                        f"0.5.16): use --steps {','.join(str(s) for s in cands if s > 0)}", exit_code=2)
    levels = bench.parse_levels(args.concurrency)
    prompts = None
    if args.prompts:
        from ..measure.prompts import load_prompts

        prompts = load_prompts(args.prompts)
    opts = scan.ScanOptions(candidates=cands, levels=levels, block=args.block, min_cycles=args.min_cycles,
                            max_tokens=args.max_tokens, prompts=prompts or [], level_time_s=args.time_limit,
                            warmup=args.warmup,
                            baseline=args.baseline, baseline_runs=args.baseline_runs, within_pct=args.within,
                            profile_every=args.profile_every, precision_pct=args.precision)
    trees = []
    if args.trees is not None:
        from ..serve.trees_launch import parse as parse_trees

        trees = parse_trees(args.trees)
        opts.trees = [t.state.label for t in trees]
        opts.tree_ranges = {t.state.label: (t.lo, t.hi) for t in trees}
    opts.check()
    base = launch_config.load_preset(preset) if preset else launch_config.LaunchConfig()
    name = base.name or (Path(args.model).name if args.model else "scan")
    out_dir = _check_out(Path(args.out or f"scan-{name}"))
    extra = merge_extra(list(base.extra_args), given)
    mrr = scan_memory._extra_int(extra, "--max-running-requests")
    if mrr is not None and mrr < max(levels):
        raise UserError(f"--max-running-requests {mrr} (from the preset) is below the top level "
                        f"{max(levels)}: the batch would never reach it. Add `-- --max-running-requests "
                        f"{max(levels)}` (and --cuda-graph-max-bs-decode {max(levels)} for graphs there)",
                        exit_code=2)
    notes = [note] if note else []
    if len({json.dumps(x, sort_keys=True) for x in prompts or [bench.DEFAULT_PROMPT]}) == 1:
        notes.append("one prompt: at temperature 0 every request generates the same tokens, so the cells measure "
                     "that one text; the hold schedule spreads every step count over all of it (shuffled blocks), but "
                     "a cell is then as good as the cycles it has: on CPU (tiny 8B chat path) +-0.6-1.8 % sd at ~900 "
                     "steady cycles a key, and 16 streams that start together are one stream (docs/guide/scan.md). Give "
                     "--prompts with requests like your traffic (a tiny build: tiny --paths N)")
    gmax = scan_memory._extra_int(extra, "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    if gmax is not None and gmax < max(levels):
        notes.append(f"CUDA graphs are captured up to batch size {gmax}: levels above it run eager (the cells "
                     f"say graph false); add `-- --cuda-graph-max-bs-decode {max(levels)}` to capture them")
    if 0 in cands and "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND" not in {**os.environ, **base.env}:
        notes.append("step 0 runs SGLang's draft extend too (set SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the "
                     "preset's env to skip it; on the H200 that moved step 0 from 174.1 to 185.8 tok/s at 1 stream)")
    cfg_path = out_dir / scan.CONFIG_NAME
    # The one-tier config is checked from a scratch copy; --out is made and gets it only once all
    # passed and a server will start: a dry run or a refusal leaves nothing behind.
    with tempfile.TemporaryDirectory(prefix="sgl-eagle3-scan-") as stage:
        staged = Path(stage) / scan.CONFIG_NAME
        write_json(staged, adaptive_format.one_tier(cands))
        try:
            read = loader.load(staged)
        except (ValueError, AssertionError, KeyError, TypeError) as exc:
            raise UserError(f"{cfg_path}: SGLang {env.version}'s own loader ({loader.source}) refuses the "
                            f"one-tier config: {exc}", exit_code=2) from exc
        common = {k: v for k, v in {"model": args.model, "draft": args.draft, "tp": args.tp, "port": args.port,
                                    "timeout": args.timeout, "python": args.python,
                                    "server_module": args.server_module}.items() if v is not None}
        cfg = launch_config.override(base, **common, adaptive=str(staged), profile=True, trees=args.trees,
                                     profile_out=str((out_dir / "prof.jsonl").absolute()),
                                     profile_every=args.profile_every, log=str(out_dir / "server.log"),
                                     name=f"{name}-scan")
        cfg.extra_args = extra
        cfg.env = {**cfg.env, **scan.hold_env(args.block, cands, opts.trees)}
        check = False if args.no_sglang_check else None
        notes += [n.replace(str(staged), str(cfg_path)) for n in _validate(flags, cfg, env, check, args.dry_run)]
        plain = None
        if args.baseline:
            plain_common = {k: v for k, v in common.items() if k != "draft"}
            plain = launch_config.override(base, **plain_common, no_spec=True, log=str(out_dir / "plain-server.log"),
                                           name=f"{name}-plain")
            plain.extra_args = extra
            plain.profile = False
            flags.validate(plain, env, sglang_check=False)
        if not args.dry_run:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_json(cfg_path, adaptive_format.one_tier(cands))
        cfg.adaptive = str(cfg_path)  # the file the server reads
        return {"env": env, "loader": loader, "opts": opts, "cfg": cfg, "plain": plain, "out_dir": out_dir,
                "notes": notes, "read": read}


def _validate(flags: Any, cfg: Any, env: Any, check: bool | None, dry_run: bool) -> list[str]:
    """Our release rules, then SGLang's own check. As in `launch --dry-run`: where SGLang cannot be
    imported (a CPU box without its CUDA dependencies), a dry run goes on with our rules and says
    so; a real scan still stops there."""
    import copy

    pristine = copy.deepcopy(cfg)
    try:
        return flags.validate(cfg, env, sglang_check=check)
    except UserError as exc:
        if not (dry_run and exc.exit_code == 1 and "could not import SGLang" in str(exc)):
            raise
        why = str(exc).split("(", 1)[-1].split(");", 1)[0]
    cfg.__dict__.update(copy.deepcopy(pristine.__dict__))  # afresh: the first pass already adjusted it
    return [*flags.validate(cfg, env, sglang_check=False),
            f"SGLang's own argument check skipped for this dry run: it cannot import SGLang here ({why}). Our "
            "release rules passed; a real scan runs SGLang's check first"]


def _check_out(out_dir: Path) -> Path:
    """--out before anything is written or started: a folder we can write in (a file there, an
    uncreatable folder: one line, exit 2), no scan.json there yet (a dangling symlink counts: it
    would be written through), no symlink at the files the scan truncates (server.log)."""
    from ..documents.outputs import check_folder

    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: is a file, not a folder (the scan writes scan.json, ladder.json, "
                        "adaptive.json and server.log there)", exit_code=2)
    made = [d for d in (out_dir, *out_dir.parents) if not d.exists()]
    check_folder(out_dir)  # can be made and written in; what it made goes again (a dry run makes nothing)
    for d in made:  # deepest first
        with contextlib.suppress(OSError):
            d.rmdir()
    scan_json = out_dir / "scan.json"
    if scan_json.exists() or scan_json.is_symlink():
        what = " (a symbolic link)" if scan_json.is_symlink() else ""
        raise UserError(f"{scan_json} exists{what}: give another --out (or move it away)", exit_code=2)
    for name in ("server.log", "plain-server.log"):
        if (out_dir / name).is_symlink():
            raise UserError(f"{out_dir / name}: a symbolic link; refused (the server's log is truncated at "
                            "the start: its target would be lost)", exit_code=2)
    return out_dir


def _progress_printer() -> Any:
    def show(p: dict[str, Any]) -> None:
        cov = p["coverage"]
        parts = " ".join(f"{s if isinstance(s, str) else f's{s}'} {min(cov.get(s, 0), 10**6)}/{p['min_cycles']}"
                         for s in p["candidates"])
        err.print(f"[scan] {p['level']} stream(s), run {p['runs']}, {p['elapsed_s']:.0f} s: steady cycles {parts}"
                  + (f"; {p['ranking']}" if p.get("ranking") else ""), highlight=False, markup=False)
    return show


def run(args: argparse.Namespace) -> int:
    from ..serve import server
    from ..tune import scan, scan_memory

    b = build(args)
    cfg, opts, out_dir = b["cfg"], b["opts"], b["out_dir"]
    for n in b["notes"]:
        err.print(f"note: {n}", highlight=False, markup=False)
    where = (f"for {out_dir / scan.CONFIG_NAME}, read by the release's loader; dry run: not written" if args.dry_run
             else f"written to {out_dir / scan.CONFIG_NAME}, read back by the release's loader")
    out.print(f"SGLang {b['env'].version}: one server, one tier {b['read']} ({where}), start at --steps {cfg.steps} "
              f"(the largest candidate: the start-step rule); hold blocks of {opts.block} cycles",
              highlight=False, markup=False)
    mem = scan_memory.estimate_memory(cfg.model, cfg.draft, opts.candidates, list(cfg.extra_args))
    if mem.get("known"):
        per = ", ".join(f"s{k} {v:.2f}" for k, v in mem["per_state_gib"].items())
        out.print(f"memory of {len(opts.candidates)} states, ESTIMATED: {mem['total_gib']:.2f} GiB ({per} GiB); "
                  f"{mem['basis']}", highlight=False, markup=False)
    else:
        out.print(f"memory of {len(opts.candidates)} states: no estimate ({mem['why']})", highlight=False,
                  markup=False)
    from ..serve.trees_launch import summary as trees_summary

    for line in trees_summary(cfg):  # --trees: graph sizes and the sizing envelope (no estimate for trees)
        out.print(line, highlight=False, markup=False)

    if args.dry_run:
        from .launch import _print_command

        argv, add = server.build_command(cfg)
        _print_command(argv, add, title=f"scan server, SGLang {b['env'].version}; dry run, nothing started")
        if b["plain"] is not None:
            argv, add = server.build_command(b["plain"])
            _print_command(argv, add, title="plain server for --baseline (after the scan)")
        return 0

    # every server of the scan is recorded where `stop --all` looks, from its spawn to its stop
    pid_file = server.check_pid_file(server.default_pid_file(cfg))

    def factory(c: Any) -> Any:
        return server.Server(c, grace=args.grace,
                             pid_file=pid_file if c.port == cfg.port else server.default_pid_file(c))

    from ..serve.interrupts import as_interrupt

    try:
        with as_interrupt():  # Ctrl-C / SIGTERM / SIGHUP: stop the group (grace, SIGKILL), keep what was measured
            doc = _run(scan, opts, cfg, out_dir, b, factory)
    except server.ServerFailed as exc:
        err.print(f"--- last {len(exc.log_tail)} lines of the server log ---", highlight=False, markup=False)
        for line in exc.log_tail:
            err.print(line, highlight=False, markup=False)
        raise
    if args.json:
        from .console import print_json

        print_json(doc)
    else:
        render(doc)
    out.print(f"wrote {out_dir / 'scan.json'}" + (f", {doc['client_file']}" if doc.get("client_file") else "")
              + (f", {doc['adaptive']['path']}" if doc.get("adaptive") else ""), highlight=False, markup=False)
    from ..measure.plot_scan import draw_beside

    picture = draw_beside(doc, out_dir)  # scan.png beside scan.json, or one line saying why not
    if picture:
        (err if args.json else out).print(picture, highlight=False, markup=False)
    if doc["interrupted"]:
        return 130
    if not doc["cells"]:  # nothing to compare: not a result, whatever else was written
        why = "; ".join(n for n in doc["notes"] if n.startswith("level ")) or "no level was driven"
        raise UserError(f"scan: measured no cell (no candidate has a steady cycle with accept counts at any "
                        f"level's batch size): {why}; scan.json keeps the client's figures", exit_code=1)
    return 0


def _run(scan: Any, opts: Any, cfg: Any, out_dir: Path, b: dict[str, Any], factory: Any) -> dict[str, Any]:
    return scan.run_scan(opts, cfg, out_dir, version=b["env"].version, loader=b["loader"], factory=factory,
                         baseline_cfg=b["plain"], log=lambda m: err.print(f"[scan] {m}", highlight=False, markup=False),
                         progress=_progress_printer())


# ------------------------------------------------------------------ what it prints (also `compare`)


def _f(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _label(steps: int | str) -> str:
    """A state as the tables print it: "5 steps" for a chain, "tree 5x4x21" for a tree."""
    from ..documents.scan_doc import STEP0_LABEL

    if isinstance(steps, str):
        if not steps.isdigit():
            return f"tree {steps}"
        steps = int(steps)
    return STEP0_LABEL if steps == 0 else f"{steps} step{'s' if steps > 1 else ''}"


def _order(c: dict[str, Any]) -> tuple[Any, ...]:
    from ..documents.scan_doc import is_tree

    return (is_tree(c), c["steps"], c.get("topk") or 1, c.get("draft_tokens") or 0)


def twin_lines(tw: dict[str, Any] | None) -> list[str]:
    """The outside twin of one level, like for like: the client's aggregate (decode tokens / decode
    seconds over its requests) against the probes' aggregate over the same level; the client's
    mean of per-request rates beside it, named as what it is."""
    if not tw:
        return []
    agg, pa = tw.get("client_aggregate") or {}, tw.get("probes") or {}
    d = tw.get("probes_vs_client_pct")
    lines = [f"  outside twin, level {tw['level']}: client aggregate {_f(agg.get('per_stream_tok_s'))} tok/s per stream "
             f"(decode tokens / decode s summed over {agg.get('requests', 0)} requests: every cycle they were in, all "
             f"step counts, boundary cycles and gaps too) vs probes {_f(pa.get('per_stream_tok_s'))} (tokens / "
             f"batch size x cycle ms over {pa.get('cycles', 0)} steady cycles {pa.get('steps_mix', {})})"
             + (f": {d:+.1f}% probes vs client" if d is not None else "")]
    lines.append(f"    client per request: mean {_f(tw.get('client_mean'))}, median {_f(tw.get('client_median'))} tok/s "
                 f"(a mean of rates of requests that each ran under several step counts: not an aggregate); total "
                 f"{_f(tw.get('throughput_tok_s'))} tok/s; accept len {_f(tw.get('accept_length'), '.2f')} "
                 f"({tw.get('accept_source') or '-'}, every cycle)")
    return lines


def memory_lines(mem: dict[str, Any]) -> list[str]:
    """Graph memory of the states: measured (server log) per state beside the estimate."""
    est = mem.get("estimate") or {}
    m = mem.get("measured")
    e_tot = est.get("total_gib")
    if not m:
        if not (mem or est):
            return []
        return [f"graph memory measured: not recorded (memory.measured is null: no 'Capture ... end' / 'Built "
                f"adaptive runtime state' line was read from {mem.get('log') or 'the server log'}); estimated before "
                f"the start: {_f(e_tot, '.2f')} GiB"]
    e_per = est.get("per_state_gib") or {}
    per = ", ".join((f"s{k}" if k.isdigit() else f"tree {k}") + f" {v:.2f}" + (f" (est. {e_per[k]:.2f})" if k in e_per else "")
                    for k, v in sorted(m.get("per_state_gib", {}).items(), key=lambda kv: (not kv[0].isdigit(), kv[0])))
    extra = f"; {m['outside_states_gib']:.2f} GiB outside the states" if m.get("outside_states_gib") else ""
    return [f"graph memory measured (server log, rank 0): {m['total_gib']:.2f} GiB over "
            f"{len(m.get('per_state_gib') or {})} state(s) ({per} GiB){extra}; estimated before the start: "
            f"{_f(e_tot, '.2f')} GiB; {m.get('captures', 0)} capture line(s), {m.get('states_built', 0)} "
            f"'Built adaptive runtime state' line(s)"]


def render(doc: dict[str, Any]) -> None:
    from rich.table import Table

    from ..documents import scan_doc

    base = doc.get("baseline") or {}
    if doc.get("interrupted"):
        out.print("[yellow]interrupted:[/] the figures below are what was measured before Ctrl-C")
    for lv in doc["levels"]:
        cells = [c for c in scan_doc.main_cells(doc) if c["level"] == lv]
        if not cells:
            continue
        ref = (base.get(str(lv)) or {}).get("per_stream_tok_s")
        step0 = next((c["per_stream_tok_s"] for c in cells if c["steps"] == 0), None)
        vs_name = "vs plain" if ref else ("vs step 0" if step0 else None)
        ref = ref or step0
        t = Table(title=f"batch size {lv} ({lv} stream(s)): steady cycles of each key, interval over hold blocks",
                  title_justify="left")
        for col in ("state", "cycles / blocks", "draft", "verify", "extend", "other", "cycle ms",
                    "accept len", "accept by position", "tok/s per stream [95% over blocks]", "tok/s total"):
            t.add_column(col, justify="left" if col in ("state", "accept by position") else "right")
        if vs_name:
            t.add_column(vs_name, justify="right")
        for c in sorted(cells, key=_order):
            ph = c.get("phases") or {}
            iv = (c.get("interval") or {}).get("per_stream_tok_s")
            row = [_label(scan_doc.state_label(c)) + ("" if c["graph"] is not False else " (eager)"),
                   f"{c['cycles']} / {c['blocks']}" + (" *" if c.get("trust") else ""),
                   *[_f((ph.get(k) or {}).get("mean_ms"), ".2f") for k in PHASES],
                   _f(c["cycle_ms"], ".2f"), _f(c["accept_len"], ".2f"),
                   " ".join(_f(r, ".2f") for r in c["per_position"]) or "-",
                   _f(c["per_stream_tok_s"]) + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else ""),
                   _f(c["throughput_tok_s"])]
            if vs_name:
                row.append(f"{(c['per_stream_tok_s'] / ref - 1) * 100:+.1f}%" if c["per_stream_tok_s"] else "-")
            t.add_row(*row)
        if base.get(str(lv)):
            bl = base[str(lv)]
            t.add_row(scan_doc.PLAIN_LABEL, f"{bl.get('runs', '-')} runs (client)", "", "", "", "", "", "", "",
                      _f(bl["per_stream_tok_s"]), _f(bl["throughput_tok_s"]), *(["+0.0%"] if vs_name else []))
        out.print(t)
        for c in sorted(cells, key=_order):
            if c.get("trust"):
                out.print(f"  * {_label(scan_doc.state_label(c))}: {c['trust']} (read with care)", highlight=False,
                          markup=False)
        for line in twin_lines(scan_doc.twin(doc, lv)):
            out.print(line, highlight=False, markup=False)
    drain = len(doc.get("cells", [])) - len(scan_doc.main_cells(doc))
    if drain:
        out.print(f"  ({drain} more cell(s) at drain batch sizes, while a level's requests finished: in scan.json)",
                  highlight=False, markup=False)
    best = doc.get("best") or {}
    if best:
        out.print("Best static configuration per batch size (per-stream tok/s, steady cycles):", highlight=False,
                  markup=False)
        for k, v in best.items():
            if k == "overall":
                continue
            vs = f", {v['vs_baseline']:+.1f}% vs the plain server" if v.get("vs_baseline") is not None else ""
            rk = (doc.get("ranking") or {}).get(k)
            out.print(f"  batch {k}: {_label(v.get('state', v['steps']))} at {v['per_stream_tok_s']:.1f} tok/s{vs}"
                      + (f"; {rk['line']}" if rk else ""), highlight=False, markup=False)
        if "overall" in best:
            o = best["overall"]
            out.print(f"  overall: {_label(o.get('state', o['steps']))} ({o['relative_to_best'] * 100:.1f}% of each "
                      f"batch size's best, geometric mean)", highlight=False, markup=False)
    if doc.get("verdict"):
        out.print("Chain or tree, per batch size (best tree vs best chain, probes' per-stream tok/s):",
                  highlight=False, markup=False)
        for line in doc["verdict"]:
            out.print(f"  {line}", highlight=False, markup=False)
    ad = doc.get("adaptive")
    if ad:
        out.print(f"Adaptive config from these measurements ({ad['format']} format, candidates within "
                  f"{ad['within_pct']:g}% of a tier's best): {ad['path']} reads {ad['tiers']}", highlight=False,
                  markup=False)
        for k, why in ad["reasons"].items():
            out.print(f"  tier {k}: {why}", highlight=False, markup=False)
        out.print(f"  launch with: sgl-eagle3 launch ... --adaptive {ad['path']}  (starts at --steps "
                  f"{ad['launch_steps']})", highlight=False, markup=False)
    for line in memory_lines(doc.get("memory") or {}):
        out.print(line, highlight=False, markup=False)
    for n in doc.get("notes", []):
        err.print(f"note: {n}", highlight=False, markup=False)
