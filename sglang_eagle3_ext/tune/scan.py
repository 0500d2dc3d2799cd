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
import json
import math
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError

SCHEMA = "eagle3_scan/1"
CONFIG_NAME = "sglang-adaptive-scan.json"   # the one-tier config the server starts with
ADAPTIVE_NAME = "adaptive.json"             # the config written from the measurements
STEP0_LABEL = "step 0 (SGLang, not plain decoding)"
PLAIN_LABEL = "plain server (no speculation)"


# ------------------------------------------------------------------ inputs


def parse_steps(text: str) -> list[int]:
    """``"0-5"`` / ``"1,2,3"`` / ``"0-2,4"`` -> sorted distinct step counts (UserError otherwise)."""
    out: set[int] = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError(part)
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
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

    def check(self) -> None:
        if self.block < 1 or self.min_cycles < 1 or self.max_tokens < 2 or self.warmup < 0:
            raise UserError("--block and --min-cycles must be >= 1, --max-tokens >= 2, --warmup >= 0", exit_code=2)
        if not self.level_time_s > 0:
            raise UserError("--time-limit must be > 0 seconds", exit_code=2)


# ------------------------------------------------------------------ probe records (eagle3_prof/3)


def parse_key(key: str) -> tuple[int, int, int, int, bool | None]:
    """``"s3.k1.d4.b8.g"`` -> (3, 1, 4, 8, True); graph letter g / e / u (unknown)."""
    try:
        s, k, d, b, g = key.split(".")
        return int(s[1:]), int(k[1:]), int(d[1:]), int(b[1:]), {"g": True, "e": False}.get(g)
    except ValueError:
        raise UserError(f"probe record key {key!r}: expected s<steps>.k<topk>.d<draft>.b<bs>.<g|e|u>") from None


class RecordTail:
    """Reads complete JSONL lines appended to the probe file since the last call (live)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn line of a crashed writer: the probes' own loader reports those
            if isinstance(rec, dict):
                out.append(rec)
        return out


def merge_keys(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The records' ``by_key`` entries merged over windows (profile_log.by_key_summary: steady
    cycles only; counts add, phases merge cycle-weighted, ``parts`` merge by hold block id)."""
    from ..measure.profile_log import by_key_summary

    out = by_key_summary(records)
    for k, v in out.items():  # keys whose head lacks a field: the key itself says it
        steps, topk, dt, bs, graph = parse_key(k)
        v.setdefault("steps", steps)
        for f, x in (("steps", steps), ("topk", topk), ("draft_tokens", dt), ("bs", bs)):
            if v.get(f) is None:
                v[f] = x
    return out


def merged_cycles(records: list[dict[str, Any]]) -> int:
    return sum(v["cycles"] for v in merge_keys(records).values())


def coverage(merged: dict[str, dict[str, Any]], bs: int) -> dict[int, int]:
    """Steady cycles per step count at batch size ``bs``."""
    cov: dict[int, int] = {}
    for v in merged.values():
        if v["bs"] == bs:
            cov[v["steps"]] = cov.get(v["steps"], 0) + v["cycles"]
    return cov


# ------------------------------------------------------------------ figures


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t_interval(values: list[float]) -> list[float] | None:
    """95 % Student-t interval of the mean of ``values`` (one value per hold block); None below 2."""
    n = len(values)
    if n < 2:
        return None
    m = statistics.fmean(values)
    half = (_T975[n - 2] if n - 2 < len(_T975) else 1.96) * statistics.stdev(values) / math.sqrt(n)
    return [round(m - half, 3), round(m + half, 3)]


def _rate(tokens: float, requests: float, cycles: float, ms_sum: float) -> tuple[float | None, float | None]:
    """(per-stream tok/s, cycle ms) of a set of cycles: tokens per request per cycle x 1000 / cycle ms."""
    if not (requests and cycles and ms_sum):
        return None, None
    cyc = ms_sum / cycles
    return tokens / requests * 1000.0 / cyc, cyc


def cell(v: dict[str, Any], level: int) -> dict[str, Any]:
    """One (steps, batch size) cell of the scan document from a merged by_key entry; its interval
    is over the key's hold blocks (profile_log.part_rates)."""
    from ..measure.profile_log import part_rates

    cyc_ms = ((v.get("phases") or {}).get("cycle") or {}).get("mean_ms")
    blocks = part_rates(v.get("parts") or [])
    ps = [b["per_stream_tok_s"] for b in blocks if b["per_stream_tok_s"] is not None]
    cm = [b["cycle_ms"] for b in blocks if b["cycle_ms"] is not None]
    return {"steps": v["steps"], "topk": v["topk"], "draft_tokens": v["draft_tokens"], "bs": v["bs"],
            "graph": v.get("graph"), "level": level, "cycles": v["cycles"], "blocks": len(blocks),
            "requests": v.get("requests"), "tokens": v.get("tokens"),
            "cycle_ms": round(cyc_ms, 4) if cyc_ms else None, "phases": v.get("phases"),
            "accept_len": v.get("accept_len"), "per_position": v.get("per_position") or [],
            "per_stream_tok_s": v.get("per_stream_tok_s"), "throughput_tok_s": v.get("throughput_tok_s"),
            "interval": {"per_stream_tok_s": t_interval(ps), "cycle_ms": t_interval(cm),
                         "basis": f"95 % t-interval of the mean over {len(ps)} hold block(s)"}}


def probe_mix(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Every steady cycle of a level's windows, all step counts and batch sizes together: what the
    client's whole-level figure should be near (the client also sees boundary cycles)."""
    merged = merge_keys(records)
    cycles = sum(v["cycles"] for v in merged.values())
    if not cycles:
        return None
    ms = sum(sum(p[2] for p in v.get("parts") or []) for v in merged.values())
    tok = sum(v["tokens"] for v in merged.values())
    req = sum(v["requests"] for v in merged.values())
    ps, cyc = _rate(tok, req, cycles, ms)
    return {"cycles": cycles, "cycle_ms": round(cyc, 4) if cyc else None,
            "accept_len": round(tok / req, 4) if req else None,
            "per_stream_tok_s": round(ps, 2) if ps else None,
            "throughput_tok_s": round(tok * 1000.0 / ms, 2) if ms else None,
            "steps_mix": {str(s): sum(v["cycles"] for v in merged.values() if v["steps"] == s)
                          for s in sorted({v["steps"] for v in merged.values()})}}


def client_aggregate(bench_doc: dict[str, Any]) -> dict[str, Any] | None:
    """The client's aggregate over a level's counted requests (warm-up runs left out): decode
    tokens / decode seconds, both summed over requests (bench.py RequestRecord: completion tokens
    after the first chunk, last token - first token). The like-for-like twin of the probes'
    aggregate; the mean of per-request rates is not, when requests ran under different step counts."""
    tok = 0
    sec = 0.0
    n = 0
    for run in bench_doc.get("runs") or []:
        for q in run.get("requests") or []:
            if q.get("error") or q.get("decode_tok_s") is None:
                continue
            t0, t1 = q.get("ttft_s"), q.get("last_token_s")
            after = int(q.get("completion_tokens") or 0) - int(q.get("first_chunk_tokens") or 1)
            if t0 is None or t1 is None or after <= 0 or not t1 > t0:
                continue
            tok += after
            sec += float(t1) - float(t0)
            n += 1
    if not n:
        return None
    return {"per_stream_tok_s": round(tok / sec, 2), "decode_tokens": tok, "decode_s": round(sec, 4), "requests": n,
            "basis": "decode tokens / decode seconds summed over the level's requests (every cycle they were in: "
                     "all step counts of the schedule, boundary cycles and the gaps between cycles)"}


def probe_aggregate(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The probes' aggregate over a level's steady cycles, every key (all step counts, drain batch
    sizes too): tokens / request-milliseconds, i.e. sum tokens x 1000 / sum (batch size x cycle ms)
    -- the same quantity as client_aggregate, measured inside the server."""
    tok = sum(c.get("tokens") or 0 for c in cells)
    req_ms = sum(c["bs"] * c["cycles"] * (c.get("cycle_ms") or 0.0) for c in cells)
    if not (tok and req_ms):
        return None
    return {"per_stream_tok_s": round(tok * 1000.0 / req_ms, 2), "tokens": tok, "request_ms": round(req_ms, 2),
            "cycles": sum(c["cycles"] for c in cells),
            "steps_mix": {str(s): sum(c["cycles"] for c in cells if c["steps"] == s)
                          for s in sorted({c["steps"] for c in cells})},
            "basis": "tokens x 1000 / sum of batch size x cycle ms over the level's steady cycles (boundary "
                     "cycles left out)"}


def twin(doc: dict[str, Any], level: int) -> dict[str, Any] | None:
    """One level's outside twin, like for like: the client's aggregate against the probes'
    aggregate over the same level; the client's mean / median of per-request rates beside them."""
    cl = (doc.get("client") or {}).get(str(level)) or {}
    agg = cl.get("aggregate")
    pa = probe_aggregate([c for c in doc.get("cells", []) if c["level"] == level])
    if not (agg or pa or cl):
        return None
    diff = (round((pa["per_stream_tok_s"] / agg["per_stream_tok_s"] - 1) * 100, 2)
            if agg and pa and agg.get("per_stream_tok_s") else None)
    return {"level": level, "client_aggregate": agg, "probes": pa, "probes_vs_client_pct": diff,
            "client_mean": cl.get("per_stream_tok_s"), "client_median": cl.get("per_stream_tok_s_median"),
            "throughput_tok_s": cl.get("throughput_tok_s"), "accept_length": cl.get("accept_length"),
            "accept_source": cl.get("accept_source")}


def backfill_client(doc: dict[str, Any], folder: Path) -> None:
    """Scan results written before the client aggregate existed: compute it from the ladder.json
    beside scan.json (its per-request data), saying so."""
    missing = [k for k, v in (doc.get("client") or {}).items() if isinstance(v, dict) and "aggregate" not in v]
    lad_path = folder / "ladder.json"
    if not missing or not lad_path.is_file():
        return
    try:
        lad = json.loads(lad_path.read_text())
        levels = {str(lv["concurrency"]): lv["bench"] for lv in lad.get("levels") or []}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    for k in missing:
        if k in levels:
            agg = client_aggregate(levels[k])
            if agg:
                agg["source"] = str(lad_path)
            doc["client"][k]["aggregate"] = agg


def main_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells measured at the batch size their level aimed at (the drain batch sizes of a level,
    when requests finish one by one, stay in ``cells`` but are not compared)."""
    return [c for c in doc.get("cells", []) if c["bs"] == c["level"]]


def best_static(doc: dict[str, Any]) -> dict[str, Any]:
    """The best static step count per batch size (per-stream tok/s) and overall (the best summed
    over the levels' batch sizes, each level weighted alike by its per-stream rate)."""
    base = doc.get("baseline") or {}
    best: dict[str, Any] = {}
    by_bs: dict[int, list[dict[str, Any]]] = {}
    for c in main_cells(doc):
        if c["per_stream_tok_s"]:
            by_bs.setdefault(c["bs"], []).append(c)
    for bs, cs in sorted(by_bs.items()):
        b = max(cs, key=lambda c: (c["per_stream_tok_s"], -c["steps"]))
        ref = (base.get(str(bs)) or {}).get("per_stream_tok_s")
        best[str(bs)] = {"steps": b["steps"], "per_stream_tok_s": b["per_stream_tok_s"],
                         "throughput_tok_s": b["throughput_tok_s"],
                         "vs_baseline": round((b["per_stream_tok_s"] / ref - 1) * 100, 2) if ref else None}
    if by_bs:
        steps = set.intersection(*({c["steps"] for c in cs} for cs in by_bs.values()))
        if steps:
            def score(s: int) -> float:  # geometric mean of per-stream rate relative to each level's best
                rel = [next(c["per_stream_tok_s"] for c in cs if c["steps"] == s) / max(c["per_stream_tok_s"] for c in cs)
                       for cs in by_bs.values()]
                return math.exp(statistics.fmean(math.log(r) for r in rel))
            s = max(sorted(steps), key=score)
            best["overall"] = {"steps": s, "relative_to_best": round(score(s), 4),
                               "basis": "the one step count with the highest geometric mean of its per-stream "
                                        "tok/s relative to each batch size's best"}
    return best


def table(doc: dict[str, Any]) -> dict[int, dict[int, float]]:
    """{batch size: {steps: per-stream tok/s}} of the main cells (adaptive.choose's input)."""
    t: dict[int, dict[int, float]] = {}
    for c in main_cells(doc):
        if c["per_stream_tok_s"]:
            t.setdefault(c["bs"], {})[c["steps"]] = c["per_stream_tok_s"]
    return t


def tier_reasons(choices: list[Any], within_pct: float) -> dict[str, str]:
    out = {}
    for c in choices:
        best = c.tok_s[c.best_steps]
        others = [f"{s} ({c.tok_s[s]:.1f}, {100 * (c.tok_s[s] / best - 1):+.1f}%)" for s in c.candidates
                  if s != c.best_steps]
        out[str(c.batch_size)] = (f"best {c.best_steps} steps at {best:.1f} tok/s per stream"
                                  + (f"; within {within_pct:g}%: " + ", ".join(others) if others else
                                     f"; no other step count within {within_pct:g}%")
                                  + (f"; {c.note}" if c.note else ""))
    return out


def write_adaptive(doc: dict[str, Any], out_path: Path, loader: Any, within_pct: float) -> dict[str, Any] | None:
    """The adaptive config from the measured cells, by the same chooser/writer as `adaptive write`."""
    from . import adaptive

    t = table(doc)
    if not t:
        return None
    choices, cfg, read = adaptive.write(t, out_path, loader, within_pct)
    return {"path": str(out_path), "format": loader.format, "tiers": {str(k): v for k, v in sorted(read.items())},
            "config": cfg, "reasons": tier_reasons(choices, within_pct), "within_pct": within_pct,
            "launch_steps": adaptive.launch_steps(read)}


# ------------------------------------------------------------------ memory of N states (estimate)


def _cfg_json(path: str | None) -> dict[str, Any]:
    try:
        data = json.loads((Path(str(path)).expanduser() / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return {}
    return data.get("text_config", data) if isinstance(data, dict) else {}


def _extra_int(extra: list[str], *names: str) -> int | None:
    for i, a in enumerate(extra):
        for n in names:
            if a == n and i + 1 < len(extra):
                try:
                    return int(extra[i + 1])
                except ValueError:
                    return None
            if a.startswith(n + "="):
                try:
                    return int(a.split("=", 1)[1])
                except ValueError:
                    return None
    return None


def estimate_memory(model: str | None, draft: str | None, candidates: list[int],
                    extra: list[str]) -> dict[str, Any]:
    """A rough estimate of what N runtime states add, from the model configs and the captured
    batch sizes; stated as an estimate, with its basis. The measured twin is read from the
    server log after the start (``log_graph_memory``).

    Per state with s steps (topk 1: s + 1 verify tokens per request), at the largest captured
    batch size B: verify graph activations ~ B (s+1) x (4 hidden + 2 intermediate) bf16 + B (s+1)
    x vocab fp32 logits; draft + extend graphs ~ B (s+1) x 4 draft-hidden bf16 + B x draft-vocab
    fp32 x s. Activations only: it leaves out what SGLang's graph pools keep besides them
    (workspaces, attention metadata, pool granularity), so it is a floor, not a forecast: on the
    H200 the MoE shape at batch 8 measured 0.23-1.02 GiB per state against 0.01-0.04 estimated
    (docs/gpu-results.md, round 5). The measured line is the figure to trust.
    """
    t, d = _cfg_json(model), _cfg_json(draft)
    b_cap = _extra_int(extra, "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    assumed_b = b_cap is None
    b = b_cap or 256
    h = int(t.get("hidden_size") or 0)
    inter = int(t.get("intermediate_size") or 4 * h)
    vocab = int(t.get("vocab_size") or 0)
    dh = int(d.get("hidden_size") or h)
    dvocab = int(d.get("draft_vocab_size") or d.get("vocab_size") or vocab)
    if not (h and vocab):
        return {"known": False, "why": "no hidden_size / vocab_size in the target's config.json"}
    per = {}
    for s in candidates:
        tok = b * (s + 1)
        verify = tok * (4 * h + 2 * inter) * 2 + tok * vocab * 4
        draft_b = (tok * 4 * dh * 2 + b * dvocab * 4 * s) if s > 0 else tok * 4 * dh * 2
        per[str(s)] = round((verify + draft_b) / 2**30, 3)
    return {"known": True, "per_state_gib": per, "total_gib": round(sum(per.values()), 3),
            "captured_max_bs": b, "captured_max_bs_assumed": assumed_b,
            "basis": ("estimate: per state, verify + draft + extend graph activations at the largest captured "
                      f"batch size B = {b}" + (" (assumed: SGLang picks its default from GPU memory; pass "
                                               "-- --cuda-graph-max-bs-decode N to fix it)" if assumed_b else
                                               " (from the launch args)")
                      + ", from hidden/intermediate/vocab sizes of the configs; activations only, a floor (the "
                        "graph pools measured 10-25x more on the H200 MoE shape); the measured twin is read from the server log ('Capture ... end ... mem "
                        "usage' and 'Built adaptive runtime state ... mem=' lines), printed with the results")}


_CAPTURE_END = re.compile(r"Capture ([\w -]+?) end\..*?mem usage=([\d.]+) GB(?:, avail mem=([\d.]+) GB)?",
                          re.IGNORECASE)
_BUILT = re.compile(r"Built adaptive runtime state steps=(\d+):.*?mem=(-?[\d.]+) ?GB")
_START = re.compile(r"AdaptiveSpeculativeParams initialized: steps=(\d+)")
_RANK = re.compile(r"^\[[^\]]*?\bTP(\d+)\b[^\]]*\]")


def log_graph_memory(log_path: str | Path | None, start_steps: int | None = None) -> dict[str, Any] | None:
    """The measured twin of estimate_memory, from SGLang's own log lines (rank 0 only: lines of
    other TP ranks, '[... TP1]', are skipped).

    Two kinds of line (0.5.16; the same text from 0.5.12.post1 to 0.5.23):
    - 'Capture <what> CUDA graph end. elapsed=..., mem usage=X GB, avail mem=Y GB.'
      (model_runner_components/cuda_graph_setup.py: target verify; eagle_worker_v2.py: draft decode,
      draft extend), logged for the start state and, inside each built state, for its draft graphs;
    - 'Built adaptive runtime state steps=N: elapsed=...s, mem=X GB' (eagle_worker_v2.py
      build_adaptive_runtime_state, called by adaptive_runtime_state.init_states for every candidate
      but the start step): the whole state, its draft captures and its target graphs (which log no
      Capture line of their own) included.
    So: start state = the Capture lines up to its draft extend capture (target verify, draft decode,
    draft extend: the workers' own init order), or up to the first Built line; every other state =
    its Built line (the Capture lines since the previous one are inside it, not added again).
    """
    if not log_path or not Path(log_path).is_file():
        return None
    text = Path(log_path).read_text(errors="replace")
    per_state: dict[str, float] = {}
    by: dict[str, float] = {}
    start_gib = 0.0
    pending = 0.0  # Capture lines since the start state's: inside the next Built line, if any
    start_open = True
    captures = 0
    built = 0
    avail = None
    for line in text.splitlines():
        r = _RANK.match(line)
        if r and r.group(1) != "0":
            continue
        if start_steps is None and (m := _START.search(line)):
            start_steps = int(m.group(1))
        if m := _BUILT.search(line):
            built += 1
            per_state[m.group(1)] = round(per_state.get(m.group(1), 0.0) + float(m.group(2)), 3)
            pending = 0.0
            start_open = False
            continue
        if m := _CAPTURE_END.search(line):
            captures += 1
            by[m.group(1)] = round(by.get(m.group(1), 0.0) + float(m.group(2)), 3)
            if m.group(3):
                avail = float(m.group(3))
            if start_open:
                start_gib += float(m.group(2))
                start_open = not m.group(1).lower().startswith("draft extend")  # the start state's last capture
            else:
                pending += float(m.group(2))
    if not (captures or built):
        return None
    if start_gib or not built:
        per_state = {str(start_steps) if start_steps is not None else "start": round(start_gib, 3), **per_state}
    return {"captures": captures, "states_built": built, "per_state_gib": per_state,
            "outside_states_gib": round(pending, 3),
            "total_gib": round(sum(per_state.values()) + pending, 3), "by_capture": by, "avail_after_gib": avail,
            "basis": "rank 0 of the server log: the start state = its 'Capture ... end' lines (mem usage); every "
                     "other state = its 'Built adaptive runtime state ... mem=' line (its draft captures inside "
                     "it); Capture lines after the last Built line are outside_states_gib"}


def remeasure(doc: dict[str, Any], start_steps: int | None) -> None:
    """Read the scan server's log again once it stopped (a release that builds a state later than
    the health check, a log written late, an interrupted start): the later read wins when it saw more."""
    log = (doc.get("memory") or {}).get("log")
    if not log:
        return
    m = log_graph_memory(log, start_steps)
    old = doc["memory"].get("measured")
    if m and (not old or (m["captures"], m["states_built"]) > (old.get("captures", 0), old.get("states_built", 0))):
        doc["memory"]["measured"] = m


# ------------------------------------------------------------------ the run


@dataclasses.dataclass
class LevelState:
    level: int
    runs: list[Any] = dataclasses.field(default_factory=list)
    warm: list[Any] = dataclasses.field(default_factory=list)
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    started: float = 0.0
    stop_reason: str | None = None


def hold_env(block: int, candidates: list[int]) -> dict[str, str]:
    """The plugin's hold schedule: blocks of ``block`` cycles, the candidates largest first (the
    server starts at the largest, so block 0 needs no switch; hold.py rotates forth and back)."""
    from ..runtime import settings

    return {settings.HOLD.name: str(block),
            settings.HOLD_STEPS.name: ",".join(map(str, sorted(candidates, reverse=True)))}


def new_document(opts: ScanOptions, version: str, cfg: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "sglang_version": version, "model": cfg.model, "draft": cfg.draft,
            "candidates": opts.candidates, "levels": opts.levels, "block": opts.block,
            "min_cycles": opts.min_cycles, "max_tokens": opts.max_tokens,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "finished": None, "interrupted": False,
            "cells": [], "baseline": None, "client": {}, "probe_mix": {}, "levels_done": [],
            "best": {}, "adaptive": None, "memory": {}, "notes": [],
            "definitions": {
                "per_stream_tok_s": "probes: tokens per request per steady cycle x 1000 / mean cycle ms "
                                    "(one key: these steps at this batch size)",
                "throughput_tok_s": "probes: tokens x 1000 / summed cycle ms of the key's steady cycles",
                "accept_len": "tokens per request per cycle, incl. the bonus token",
                "interval": "95 % t-interval of the mean over hold blocks of the key",
                "step 0": STEP0_LABEL,
                "client": "the bench client over the whole level: every step count of the schedule and "
                          "boundary cycles together; per_stream_tok_s is the mean of per-request rates",
                "client.aggregate": "decode tokens / decode seconds summed over the level's requests: the twin "
                                    "of the probes' aggregate (tokens / batch size x cycle ms over steady cycles)"}}


def finish(doc: dict[str, Any], out_dir: Path, loader: Any, within_pct: float) -> dict[str, Any]:
    """Best per batch size, the adaptive config; write scan.json."""
    from ..measure.bench import write_json

    doc["best"] = best_static(doc)
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
    from ..measure import bench

    bopts = bench.BenchOptions(url=srv_url, runs=1, warmup=0, max_tokens=opts.max_tokens,
                               prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=ls.level,
                               label=f"scan level {ls.level}", model=model, ignore_eos=opts.ignore_eos)
    ep = bench.Endpoint(srv_url, bopts.timeout_s)
    if model is None:
        model = bench.detect_model(ep)
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
        cov = coverage(merge_keys(ls.records), ls.level)
        elapsed = time.monotonic() - ls.started
        done = all(cov.get(s, 0) >= opts.min_cycles for s in opts.candidates)
        progress({"level": ls.level, "coverage": cov, "elapsed_s": elapsed, "runs": len(ls.runs),
                  "min_cycles": opts.min_cycles, "candidates": opts.candidates})
        if done:
            ls.stop_reason = "covered"
            return model
        if len(ls.runs) >= 3 and not cov and merged_cycles(ls.records):
            seen = sorted({v["bs"] for v in merge_keys(ls.records).values()})
            ls.stop_reason = (f"no steady cycle at batch size {ls.level} in {len(ls.runs)} runs (seen: {seen}); "
                              f"is --max-running-requests below {ls.level}?")
            return model
        absent = [s for s in opts.candidates if not cov.get(s)]
        if absent and all(cov.get(s, 0) >= 2 * opts.min_cycles for s in opts.candidates if s not in absent):
            # the schedule visited them (it rotates every block), but the probes matched no accept
            # counts to their cycles: waiting longer would not help
            ls.stop_reason = (f"steps {absent}: no steady cycle with accept counts at batch size {ls.level} while "
                              f"the others reached {2 * opts.min_cycles} (see the probe file's control.choices)")
            return model
        if elapsed > opts.level_time_s:
            short = [s for s in opts.candidates if cov.get(s, 0) < opts.min_cycles]
            ls.stop_reason = (f"time limit {opts.level_time_s:.0f} s: steps {short} below {opts.min_cycles} "
                              f"steady cycles at batch size {ls.level}")
            return model


def close_level(doc: dict[str, Any], opts: ScanOptions, ls: LevelState) -> None:
    """The level's cells, client figures and probe mix into the document."""
    from ..measure import bench

    merged = merge_keys(ls.records)
    doc["cells"] = [c for c in doc["cells"] if c["level"] != ls.level]
    doc["cells"] += [cell(v, ls.level) for _, v in sorted(merged.items(), key=lambda kv: (kv[1]["bs"], kv[1]["steps"]))]
    if ls.runs:
        bopts = bench.BenchOptions(url="scan", runs=len(ls.runs), warmup=len(ls.warm), max_tokens=opts.max_tokens,
                                   prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=ls.level,
                                   label=f"scan level {ls.level}", ignore_eos=opts.ignore_eos)
        bdoc = bench.build_result(bopts, opts.model or "", ls.runs, ls.warm)
        doc.setdefault("_bench", {})[str(ls.level)] = bdoc
        doc["client"][str(ls.level)] = {**bench.level_summary(bdoc), "aggregate": client_aggregate(bdoc)}
    from ..measure.profile_log import control_summary

    doc["probe_mix"][str(ls.level)] = probe_mix(ls.records)
    doc.setdefault("control", {})[str(ls.level)] = control_summary(ls.records)
    if ls.level not in doc["levels_done"]:
        doc["levels_done"].append(ls.level)
    if ls.stop_reason and ls.stop_reason != "covered":
        doc["notes"].append(f"level {ls.level}: {ls.stop_reason}")


def ladder_doc(doc: dict[str, Any], url: str) -> dict[str, Any] | None:
    """The client's runs as one eagle3_ladder/1 document (profile --bench and compare read it)."""
    from ..measure import bench

    levels = [{"concurrency": int(k), "summary": bench.level_summary(b), "bench": b}
              for k, b in sorted((doc.get("_bench") or {}).items(), key=lambda kv: int(kv[0]))]
    if not levels:
        return None
    return {"schema": bench.LADDER_SCHEMA, "label": "scan (hold schedule: every candidate)", "url": url,
            "model": levels[0]["bench"].get("model"), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "params": {"levels": [lv["concurrency"] for lv in levels], "max_tokens": doc["max_tokens"]},
            "definitions": {"per_stream_tok_s": "mean over runs of the mean decode tok/s of the run's requests",
                            "throughput_tok_s": "mean over runs of all completion tokens / run wall time"},
            "levels": levels}


def bench_baseline(url: str, opts: ScanOptions, log: Callable[[str], None]) -> dict[str, Any]:
    """The plain (no-spec) server at every level: the true baseline."""
    from ..measure import bench

    out = {}
    for n in opts.levels:
        b = bench.run_bench(bench.BenchOptions(url=url, runs=opts.baseline_runs, warmup=1, max_tokens=opts.max_tokens,
                                               prompts=list(opts.prompts) or [bench.DEFAULT_PROMPT], concurrency=n,
                                               label=f"plain level {n}", model=opts.model,
                                               ignore_eos=opts.ignore_eos))
        s = bench.level_summary(b)
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
    from ..measure.bench import write_json

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
        log(f"starting one server with {len(opts.candidates)} states (steps {opts.candidates}), start step "
            f"{cfg.steps}; log {getattr(srv, 'log_path', '?')}")
        srv.start(wait=True)
        doc["start_s"] = round(time.monotonic() - t0, 1)
        log(f"ready after {doc['start_s']:.0f} s")
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
            try:
                bsrv.start(wait=True)
                doc["baseline"] = bench_baseline(bsrv.url, opts, log)
            finally:
                bsrv.stop()
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


def markdown(doc: dict[str, Any]) -> str:
    """The per-key cells at each level's batch size as one Markdown table (table.md)."""
    base = doc.get("baseline") or {}
    head = ("batch size", "steps", "cycles / blocks", "cycle ms", "accept len", "accept by position",
            "tok/s per stream [95% over blocks]", "tok/s total", "vs plain")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":-:"] * len(head)) + "|"]
    for c in sorted(main_cells(doc), key=lambda c: (c["bs"], c["steps"])):
        iv = (c.get("interval") or {}).get("per_stream_tok_s")
        ref = (base.get(str(c["bs"])) or {}).get("per_stream_tok_s")
        vs = f"{(c['per_stream_tok_s'] / ref - 1) * 100:+.1f}%" if (ref and c["per_stream_tok_s"]) else "-"
        lines.append("| " + " | ".join([
            str(c["bs"]), STEP0_LABEL if c["steps"] == 0 else str(c["steps"]), f"{c['cycles']} / {c['blocks']}",
            f"{c['cycle_ms']:.2f}" if c["cycle_ms"] else "-", f"{c['accept_len']:.2f}" if c["accept_len"] else "-",
            " ".join("-" if r is None else f"{r:.2f}" for r in c["per_position"]) or "-",
            (f"{c['per_stream_tok_s']:.1f}" if c["per_stream_tok_s"] else "-") + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else ""),
            f"{c['throughput_tok_s']:.1f}" if c["throughput_tok_s"] else "-", vs]) + " |")
    for k, v in sorted(base.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {k} | {PLAIN_LABEL} | client | - | - | - | {v['per_stream_tok_s']:.1f} | "
                     f"{v['throughput_tok_s']:.1f} | — |")
    return "\n".join(lines)


# ------------------------------------------------------------------ reading a result


def load(path: str | Path) -> dict[str, Any]:
    """A scan result (a scan folder or its scan.json), checked through records.ScanResult."""
    from ..documents.records import ScanResult
    from ..measure.bench import read_json

    p = Path(path)
    f = p / "scan.json" if p.is_dir() else p
    if not f.exists():
        raise UserError(f"{path}: no such file (a scan folder or its scan.json)", exit_code=2)
    data = read_json(f)
    ScanResult.from_json(data, str(f))
    for i, c in enumerate(data["cells"]):
        if not isinstance(c, dict) or not all(isinstance(c.get(k), int) for k in ("steps", "bs", "level")):
            raise UserError(f"{f}: cells[{i}] needs integer steps, bs and level", exit_code=2)
    backfill_client(data, f.parent)
    return data


def is_scan(path: str | Path) -> bool:
    p = Path(path)
    f = p / "scan.json" if p.is_dir() else p
    if not f.is_file():
        return False
    try:
        head = f.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return '"eagle3_scan/' in head
