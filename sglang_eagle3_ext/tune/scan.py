"""`sgl-eagle3 scan`: every candidate step count at every load, measured inside ONE server start.

SGLang 0.5.13+ builds, at start, one runtime state (attention backends + CUDA graphs) for every
candidate step count of ``--speculative-adaptive``, and swaps them in microseconds. The scan
starts one server with ONE tier listing every candidate (adaptive_format.one_tier: every state
gets graphs at every captured batch size), at the largest candidate (the start-step rule), with the
probes on and the plugin's hold schedule (settings ``HOLD`` = cycles per block: blocks of
cycles rotated through the candidates, a pure function of per-batch-size cycle counts). It then
drives the load level by level with our bench client until every candidate has ``min_cycles``
steady cycles at that batch size (read live from the probe JSONL), or the time limit.

Every figure is one key (steps, batch size) over steady cycles, read from the eagle3_prof/3
records' ``by_key``; its interval is over hold blocks (``parts``). Beside it, per level, the
client's whole-level figures and the probes' mix over the same level (the outside twin: the client
sees every step count of the schedule, boundary cycles included).

The server is made by a *factory* ``factory(cfg, sglang_root) -> server-like`` (sweep.py's
convention); tests inject stand-ins.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..documents.scan_doc import SCHEMA, STEP0_LABEL, best_static, client_aggregate, table
from ..runtime.bounds import MAX_COUNT, MAX_STEPS
from ..runtime.errors import UserError
from .scan_cells import RecordTail, cell, coverage, merge_keys, merged_cycles, probe_mix
from .scan_memory import estimate_memory, log_graph_memory, remeasure
from .scan_rank import (
    DEFAULT_PRECISION_PCT,
    rank_tier,
    ranking,
    settled,
    undecided_runner_ups,
    verdict_lines,
)

CONFIG_NAME = "sglang-adaptive-scan.json"   # the one-tier config the server starts with
ADAPTIVE_NAME = "adaptive.json"             # the config written from the measurements


# ------------------------------------------------------------------ inputs


def parse_steps(text: str) -> list[int]:
    """``"0-5"`` / ``"1,2,3"`` / ``"0-2,4"`` -> sorted distinct step counts (UserError otherwise)."""
    out: set[int] = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            lo, hi = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part), int(part))
            if hi < lo:
                raise ValueError(part)
            if hi > MAX_STEPS:  # before a list is built: 0-9999999999 exhausted the machine's memory
                raise UserError(f"--steps {text!r}: at most {MAX_STEPS} steps (one runtime state with its own "
                                "CUDA graphs per candidate; SGLang's default tiers stop at 7)", exit_code=2)
            out.update(range(lo, hi + 1))
    except ValueError:
        raise UserError(f"--steps {text!r}: a range like 0-5 or a list like 1,2,3", exit_code=2) from None
    if len(out) < 2 or min(out) < 0:
        raise UserError(f"--steps {text!r}: at least two distinct step counts >= 0 (a scan compares them)",
                        exit_code=2)
    return sorted(out)


@dataclasses.dataclass
class ScanOptions:
    candidates: list[int]
    levels: list[int]
    block: int = 32
    min_cycles: int = 256
    max_tokens: int = 512
    prompts: list[Any] = dataclasses.field(default_factory=list)
    warmup: int = 1                # bench runs per level before counting (discarded)
    level_time_s: float = 300.0    # per level: stop driving it after this long
    baseline: bool = False
    baseline_runs: int = 3
    within_pct: float = 5.0
    profile_every: int | None = None
    ignore_eos: bool = True
    model: str | None = None       # the request's model name (default: /v1/models)
    trees: list[str] = dataclasses.field(default_factory=list)  # tree labels held beside the chains (--trees)
    precision_pct: float = DEFAULT_PRECISION_PCT  # a tier's ranking: a tie once both intervals are this narrow

    tree_ranges: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # label -> batch sizes

    @property
    def keys(self) -> list[int | str]:
        """Every state the hold schedule holds: the chains (steps), then the trees (labels)."""
        return [*self.candidates, *self.trees]

    def keys_at(self, level: int) -> list[int | str]:
        """The states held at this batch size: every chain; a tree only inside its @range (the
        hold schedule holds it only where it has CUDA graphs: stepctl.ControllerInfo.eligible)."""
        return [*self.candidates, *(t for t in self.trees
                                    if self.tree_ranges.get(t, (1, 1 << 30))[0] <= level
                                    <= self.tree_ranges.get(t, (1, 1 << 30))[1])]

    def check(self) -> None:
        """Every option before anything starts (a bad --within was refused only after the scan)."""
        if self.block < 1 or self.min_cycles < 1 or self.max_tokens < 2 or self.warmup < 0:
            raise UserError("--block and --min-cycles must be >= 1, --max-tokens >= 2, --warmup >= 0", exit_code=2)
        if max(self.block, self.min_cycles, self.max_tokens, self.warmup) > MAX_COUNT:
            raise UserError(f"--block, --min-cycles, --max-tokens and --warmup must be at most {MAX_COUNT}", 2)
        if not 0 < self.level_time_s < float("inf"):
            raise UserError(f"--time-limit {self.level_time_s}: must be a finite number > 0 seconds", exit_code=2)
        if not 0 <= self.within_pct < 100:  # NaN too: adaptive.choose's rule, said at once
            raise UserError(f"--within {self.within_pct}: a percentage in [0, 100)", exit_code=2)
        if not 0 <= self.precision_pct < 100:
            raise UserError(f"--precision {self.precision_pct}: a percentage in [0, 100)", exit_code=2)
        if self.baseline_runs < 1 or (self.profile_every is not None and self.profile_every < 1):
            raise UserError("--baseline-runs and --profile-every must be >= 1", exit_code=2)


def tier_reasons(choices: list[Any], within_pct: float, kept: dict[int, int | str] | None = None,
                 best_states: dict[str, Any] | None = None) -> dict[str, str]:
    """Why each tier lists what it lists; an undecided runner-up kept beside the best, and a tree
    that is the tier's best (SGLang's adaptive config holds chains only), said in words."""
    out = {}
    kept = kept or {}
    for c in choices:
        best = c.tok_s[c.best_steps]
        others = [f"{s} ({c.tok_s[s]:.1f}, {100 * (c.tok_s[s] / best - 1):+.1f}%)" for s in c.candidates
                  if s != c.best_steps]
        out[str(c.batch_size)] = (f"best {c.best_steps} steps at {best:.1f} tok/s per stream"
                                  + (f"; within {within_pct:g}%: " + ", ".join(others) if others else
                                     f"; no other step count within {within_pct:g}%")
                                  + (f"; {c.note}" if c.note else ""))
        ru = kept.get(c.batch_size)
        if ru is not None and ru != c.best_steps:
            out[str(c.batch_size)] += (f"; {ru} stays beside it: the scan did not decide the order of the best and "
                                       f"{ru} (intervals overlap)" if not isinstance(ru, str) else
                                       f"; the runner-up, tree {ru}, is not separated from the best (a tree is held "
                                       f"with launch --policy SCAN --trees, not in SGLang's chain tiers)")
        b = (best_states or {}).get(str(c.batch_size)) or {}
        if isinstance(b.get("state"), str) and not b["state"].isdigit():
            out[str(c.batch_size)] += (f"; the best state here is tree {b['state']} ({b['per_stream_tok_s']:.1f} tok/s): "
                                       "SGLang's adaptive config holds chains only, so this tier lists chains; "
                                       "launch --policy SCAN --trees ... holds the tree")
    return out


def write_adaptive(doc: dict[str, Any], out_path: Path, loader: Any, within_pct: float) -> dict[str, Any] | None:
    """The adaptive config from the measured cells, by the same chooser/writer as `adaptive write`."""
    from . import adaptive

    t = table(doc)
    if not t:
        return None
    kept = undecided_runner_ups(doc.get("ranking") or {})
    keep = {bs: [k] for bs, k in kept.items() if not isinstance(k, str)}
    choices, cfg, read = adaptive.write(t, out_path, loader, within_pct, keep=keep)
    return {"path": str(out_path), "format": loader.format, "tiers": {str(k): v for k, v in sorted(read.items())},
            "config": cfg, "reasons": tier_reasons(choices, within_pct, kept, doc.get("best")),
            "within_pct": within_pct, "kept_undecided": {str(k): v for k, v in sorted(kept.items())},
            "launch_steps": adaptive.launch_steps(read)}


# ------------------------------------------------------------------ the run


@dataclasses.dataclass
class LevelState:
    level: int
    runs: list[Any] = dataclasses.field(default_factory=list)
    warm: list[Any] = dataclasses.field(default_factory=list)
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    started: float = 0.0
    stop_reason: str | None = None


def hold_env(block: int, candidates: list[int], trees: list[str] | None = None) -> dict[str, str]:
    """The plugin's hold schedule: blocks of ``block`` cycles, the candidates largest first (the
    server starts at the largest, so block 0 needs no switch; hold.py rotates forth and back),
    then the trees held beside them (their labels; each held only at the batch sizes it has
    graphs for: stepctl.ControllerInfo.eligible)."""
    from ..runtime import settings

    return {settings.HOLD.name: str(block),
            settings.HOLD_STEPS.name: ",".join([*map(str, sorted(candidates, reverse=True)), *(trees or [])])}


def new_document(opts: ScanOptions, version: str, cfg: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "sglang_version": version, "model": cfg.model, "draft": cfg.draft,
            "candidates": opts.candidates, "trees": list(opts.trees), "precision_pct": opts.precision_pct,
            "levels": opts.levels, "block": opts.block,
            "min_cycles": opts.min_cycles, "max_tokens": opts.max_tokens,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "finished": None, "interrupted": False,
            "cells": [], "baseline": None, "client": {}, "probe_mix": {}, "levels_done": [],
            "best": {}, "adaptive": None, "memory": {}, "notes": [],
            "definitions": {
                "per_stream_tok_s": "probes: tokens per request per steady cycle x 1000 / mean cycle ms "
                                    "(one key: these steps at this batch size)",
                "throughput_tok_s": "probes: tokens x 1000 / summed cycle ms of the key's steady cycles",
                "accept_len": "tokens per request per cycle, incl. the bonus token",
                "interval": "95 % t-interval over the key's hold blocks: jackknife of the pooled figure "
                            "(per_stream_tok_s, accept_len, cycle_ms), each block weighed by its cycles",
                "steady_share": "the key's steady cycles of all its cycles; trust: why to read a cell with care "
                                "(few steady cycles, few blocks, a small share), else null",
                "step 0": STEP0_LABEL,
                "client": "the bench client over the whole level: every step count of the schedule and "
                          "boundary cycles together; per_stream_tok_s is the mean of per-request rates",
                "client.aggregate": "decode tokens / decode seconds summed over the level's requests: the twin "
                                    "of the probes' aggregate (tokens / batch size x cycle ms over steady cycles)"}}


def finish(doc: dict[str, Any], out_dir: Path, loader: Any, within_pct: float) -> dict[str, Any]:
    """Best per batch size, the adaptive config; write scan.json."""
    from ..documents.jsonio import write_json

    doc["best"] = best_static(doc)
    from ..documents.scan_doc import main_cells

    doc["ranking"] = ranking(main_cells(doc), doc.get("precision_pct", DEFAULT_PRECISION_PCT))
    doc["verdict"] = verdict_lines(main_cells(doc))
    try:
        doc["adaptive"] = write_adaptive(doc, out_dir / ADAPTIVE_NAME, loader, within_pct)
    except UserError as exc:
        doc["adaptive"] = None
        doc["notes"].append(f"no adaptive config written: {exc}")
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json(out_dir / "scan.json", doc)
    return doc


def drive_level(srv_url: str, opts: ScanOptions, ls: LevelState, tail: RecordTail,
                progress: Callable[[dict[str, Any]], None], model: str | None) -> str:
    """Bench runs at one concurrency until every candidate has min_cycles steady cycles at that
    batch size (or the time limit); returns the model name the server reported."""
    from ..measure import bench, chat_client

    bopts = bench.BenchOptions(url=srv_url, runs=1, warmup=0, max_tokens=opts.max_tokens,
                               prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=ls.level,
                               label=f"scan level {ls.level}", model=model, ignore_eos=opts.ignore_eos)
    ep = chat_client.Endpoint(srv_url, bopts.timeout_s)
    if model is None:
        model = chat_client.detect_model(ep)
        bopts.model = model
    for i in range(opts.warmup):
        ls.warm.append(bench.run_once(ep, bopts, model, i))
    tail.read()  # warm-up windows do not count
    ls.started = time.monotonic()
    i = 0
    while True:
        r = bench.run_once(ep, bopts, model, i)
        i += 1
        ls.runs.append(r)
        ls.records.extend(tail.read())
        merged = merge_keys(ls.records)
        cov = coverage(merged, ls.level)
        elapsed = time.monotonic() - ls.started
        keys = opts.keys_at(ls.level)
        done = all(cov.get(s, 0) >= opts.min_cycles for s in keys)
        rank = rank_tier([cell(v, ls.level) for v in merged.values() if v["bs"] == ls.level],
                         opts.precision_pct) if done else None
        progress({"level": ls.level, "coverage": cov, "elapsed_s": elapsed, "runs": len(ls.runs),
                  "min_cycles": opts.min_cycles, "candidates": keys,
                  "ranking": rank["line"] if rank else None})
        if done and settled(rank):
            ls.stop_reason = "covered"
            return model
        if len(ls.runs) >= 3 and not cov and merged_cycles(ls.records):
            seen = sorted({v["bs"] for v in merge_keys(ls.records).values()})
            ls.stop_reason = (f"no steady cycle at batch size {ls.level} in {len(ls.runs)} runs (seen: {seen}); "
                              f"is --max-running-requests below {ls.level}?")
            return model
        absent = [s for s in keys if not cov.get(s)]
        present = [s for s in keys if s not in absent]  # none yet: no window closed at this level
        if absent and present and all(cov.get(s, 0) >= 2 * opts.min_cycles for s in present):
            # the schedule visited them (it rotates every block), but the probes matched no accept
            # counts to their cycles: waiting longer would not help
            ls.stop_reason = (f"{_what(absent)} {absent}: no steady cycle with accept counts at batch size {ls.level} while "
                              f"the others reached {2 * opts.min_cycles} (see the probe file's control.choices)")
            return model
        if elapsed > opts.level_time_s:
            short = [s for s in keys if cov.get(s, 0) < opts.min_cycles]
            ls.stop_reason = (f"time limit {opts.level_time_s:.0f} s: " + (
                f"{_what(short)} {short} below {opts.min_cycles} steady cycles at batch size {ls.level}" if short else
                f"every state covered, but the ranking at batch size {ls.level} is "
                + (rank["line"] if rank else "not decided")))
            return model


def _what(keys: list[int | str]) -> str:
    return "states" if any(isinstance(k, str) for k in keys) else "steps"


def close_level(doc: dict[str, Any], opts: ScanOptions, ls: LevelState) -> None:
    """The level's cells, client figures and probe mix into the document."""
    from ..documents import bench_doc
    from ..measure import bench

    merged = merge_keys(ls.records)
    doc["cells"] = [c for c in doc["cells"] if c["level"] != ls.level]
    doc["cells"] += [cell(v, ls.level) for _, v in sorted(merged.items(), key=lambda kv: (kv[1]["bs"], kv[1]["steps"],
                                                                                        kv[1].get("topk") or 1))]
    if ls.runs:
        bopts = bench.BenchOptions(url="scan", runs=len(ls.runs), warmup=len(ls.warm), max_tokens=opts.max_tokens,
                                   prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=ls.level,
                                   label=f"scan level {ls.level}", ignore_eos=opts.ignore_eos)
        bdoc = bench.build_result(bopts, opts.model or "", ls.runs, ls.warm)
        doc.setdefault("_bench", {})[str(ls.level)] = bdoc
        doc["client"][str(ls.level)] = {**bench_doc.level_summary(bdoc), "aggregate": client_aggregate(bdoc)}
    from ..measure.accounting import control_summary

    doc["probe_mix"][str(ls.level)] = probe_mix(ls.records)
    doc.setdefault("control", {})[str(ls.level)] = control_summary(ls.records)
    if ls.level not in doc["levels_done"]:
        doc["levels_done"].append(ls.level)
    if ls.stop_reason and ls.stop_reason != "covered":
        doc["notes"].append(f"level {ls.level}: {ls.stop_reason}")


def ladder_doc(doc: dict[str, Any], url: str) -> dict[str, Any] | None:
    """The client's runs as one eagle3_ladder/1 document (profile --bench and compare read it)."""
    from ..documents import bench_doc

    levels = [{"concurrency": int(k), "summary": bench_doc.level_summary(b), "bench": b}
              for k, b in sorted((doc.get("_bench") or {}).items(), key=lambda kv: int(kv[0]))]
    if not levels:
        return None
    return {"schema": bench_doc.LADDER_SCHEMA, "label": "scan (hold schedule: every candidate)", "url": url,
            "model": levels[0]["bench"].get("model"), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "params": {"levels": [lv["concurrency"] for lv in levels], "max_tokens": doc["max_tokens"]},
            "definitions": {"per_stream_tok_s": "mean over runs of the mean decode tok/s of the run's requests",
                            "throughput_tok_s": "mean over runs of all completion tokens / run wall time"},
            "levels": levels}


def bench_baseline(url: str, opts: ScanOptions, log: Callable[[str], None],
                   out: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plain (no-spec) server at every level: the true baseline. Levels land in ``out`` as
    they finish, so an interrupt in a later level keeps the earlier ones."""
    from ..documents import bench_doc
    from ..measure import bench

    out = {} if out is None else out
    for n in opts.levels:
        b = bench.run_bench(bench.BenchOptions(url=url, runs=opts.baseline_runs, warmup=1, max_tokens=opts.max_tokens,
                                               prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=n,
                                               label=f"plain level {n}", model=opts.model,
                                               ignore_eos=opts.ignore_eos))
        s = bench_doc.level_summary(b)
        out[str(n)] = {"per_stream_tok_s": s["per_stream_tok_s"], "throughput_tok_s": s["throughput_tok_s"],
                       "source": "plain server", "runs": s["ok_runs"]}
        log(f"plain server, {n} stream(s): {s['per_stream_tok_s'] or 0:.1f} tok/s per stream")
    return out


def run_scan(opts: ScanOptions, cfg: Any, out_dir: Path, *, version: str, loader: Any,
             factory: Callable[[Any], Any], baseline_cfg: Any = None,
             log: Callable[[str], None] = print,
             progress: Callable[[dict[str, Any]], None] = lambda _p: None) -> dict[str, Any]:
    """One server start; every level driven; Ctrl-C stops the server and keeps what was measured.

    ``cfg``: the LaunchConfig already validated (adaptive config, start step, probes, hold env).
    ``factory(cfg)``: a server-like (``start(wait=True)``, ``stop()``, ``url``, ``log_path``).
    """
    from ..documents.jsonio import write_json

    opts.check()
    doc = new_document(opts, version, cfg)
    doc["memory"]["estimate"] = estimate_memory(cfg.model, cfg.draft, opts.candidates, list(cfg.extra_args))
    tail = RecordTail(Path(cfg.profile_out))
    srv = None
    ls: LevelState | None = None
    t0 = time.monotonic()
    try:
        srv = factory(cfg)
        doc["memory"]["log"] = str(srv.log_path) if getattr(srv, "log_path", None) else None
        log(f"starting one server with {len(opts.keys)} states (steps {opts.candidates}"
            + (f", trees {opts.trees}" if opts.trees else "") + "), start step "
            f"{cfg.steps}; log {getattr(srv, 'log_path', '?')}")
        srv.start(wait=True)
        doc["start_s"] = round(time.monotonic() - t0, 1)
        log(f"ready after {doc['start_s']:.0f} s")
        if opts.trees:  # what each extra state cost to build, as the server logged it
            from ..serve.trees_launch import log_lines

            for line in log_lines(doc["memory"]["log"]):
                log(f"  {line}")
        doc["memory"]["measured"] = m = log_graph_memory(doc["memory"]["log"], cfg.steps)
        log(f"graph memory (server log, rank 0): {m['total_gib']:.2f} GiB over {len(m['per_state_gib'])} state(s)"
            if m else "graph memory: no capture line in the server log yet (read again after the stop)")
        model = opts.model
        for n in opts.levels:
            ls = LevelState(n)
            model = drive_level(srv.url, opts, ls, tail, progress, model)
            opts.model = model
            close_level(doc, opts, ls)
            write_json(out_dir / "scan.json", doc)
            ls = None
        srv.stop()
        srv = None
        if opts.baseline and baseline_cfg is not None:
            log("starting the plain (no-spec) server for the true baseline")
            bsrv = factory(baseline_cfg)
            doc["baseline"] = {}
            try:
                bsrv.start(wait=True)
                bench_baseline(bsrv.url, opts, log, doc["baseline"])
            finally:
                bsrv.stop()
                doc["baseline"] = doc["baseline"] or None  # the levels measured before an interrupt
    except KeyboardInterrupt:
        doc["interrupted"] = True
        log("interrupted: stopping the server, keeping what was measured")
        if ls is not None:
            ls.records.extend(tail.read())
            ls.stop_reason = "interrupted"
            close_level(doc, opts, ls)
    finally:
        if srv is not None:
            srv.stop()
        doc["wall_s"] = round(time.monotonic() - t0, 1)
        remeasure(doc, cfg.steps)
    lad = ladder_doc(doc, getattr(cfg, "url", ""))
    if lad:
        write_json(out_dir / "ladder.json", lad)
        doc["client_file"] = str(out_dir / "ladder.json")
    doc.pop("_bench", None)
    return finish(doc, out_dir, loader, opts.within_pct)
