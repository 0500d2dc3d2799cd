"""The seeds' comparison table from bench result documents (or a sweep's results.json).

| config | tok/s (avg) | tok/s (peak) | accept len | vs baseline |

tok/s is decode tok/s per stream (tokens after the first over the time after the first) unless
another summary metric is asked; "vs baseline" = avg / baseline avg - 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..documents import kinds
from ..documents.bench_doc import LADDER_SCHEMA, check_result
from ..documents.bench_doc import LIMIT as BENCH_LIMIT
from ..documents.bench_doc import SCHEMA as BENCH_SCHEMA
from ..documents.jsonio import read_json
from ..documents.records import BenchResult, amount_error
from ..documents.sweep_doc import check_results
from ..documents.text import clean
from ..runtime.errors import UserError

SWEEP_SCHEMA = "eagle3_sweep/1"
METRICS = ("decode_tok_s", "e2e_tok_s", "throughput_tok_s")


def _num_or_none(x: Any) -> bool:
    """None, or a finite rate >= 0: NaN, Infinity (which JSON readers accept) and negative tok/s
    are no measurement."""
    return x is None or amount_error(x) is None


def _read(path: str | Path) -> Any:
    """One input file's JSON, or one line (exit 2) for a folder or an unreadable file."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a folder; give bench result files (or a sweep's results.json)",
                        exit_code=2)
    try:
        return read_json(p, what="a bench, ladder, sweep or scan document", limit=BENCH_LIMIT)
    except UserError:
        if kinds.starts_with_probe_record(p):  # JSONL: "not JSON" would not say what it is
            raise UserError(kinds.not_bench(str(p), kinds.PROBES), exit_code=2) from None
        raise


def load(paths: list[str]) -> list[dict[str, Any]]:
    """Bench documents from bench files and sweep results files, in the order given."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        data = _read(p)
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == BENCH_SCHEMA:
            BenchResult.from_json(data, str(p))
            docs.append(check_result(data, str(p)))
        elif schema == LADDER_SCHEMA:
            raise UserError(f"{p}: a concurrency ladder; compare ladders with ladders only "
                            f"(every file a ladder)", exit_code=2)
        elif schema == SWEEP_SCHEMA:
            for c in check_results(data, str(p))["configs"]:
                if c.get("status") == "ok" and c.get("bench"):
                    doc = dict(c["bench"])
                    doc["label"] = str(c.get("name"))
                    doc["baseline"] = bool(c.get("baseline"))
                    docs.append(doc)
        else:
            other = kinds.of(data) or (kinds.PROBES if kinds.is_probe_record(data) else None)
            if other is not None:
                raise UserError(kinds.not_bench(str(p), other), exit_code=2)
            raise UserError(f"{p}: neither a bench result ({BENCH_SCHEMA}) nor a sweep result "
                            f"({SWEEP_SCHEMA})", exit_code=2)
    if not docs:
        raise UserError("no finished results in the files given", exit_code=2)
    return docs


def pick_baseline(docs: list[dict[str, Any]], label: str | None) -> int:
    if label is not None:
        for i, d in enumerate(docs):
            if d.get("label") == label:
                return i
        known = ", ".join(repr(d.get("label")) for d in docs)
        raise UserError(f"--baseline {label!r} matches no result (labels: {known})", exit_code=2)
    for i, d in enumerate(docs):
        if d.get("baseline"):
            return i
    return 0


def rows(docs: list[dict[str, Any]], baseline: str | None = None,
         metric: str = "decode_tok_s") -> list[dict[str, Any]]:
    if metric not in METRICS:
        raise UserError(f"metric must be one of {', '.join(METRICS)}", exit_code=2)
    b = pick_baseline(docs, baseline)
    missing = [str(d.get("label")) for d in docs if not isinstance(d["summary"].get(metric), dict)]
    if missing:
        raise UserError(f"metric {metric}: missing in the result(s) {', '.join(missing)}", exit_code=2)
    base_avg = docs[b]["summary"][metric]["avg"]
    out = []
    for i, d in enumerate(docs):
        s = d["summary"]
        avg, peak = s[metric]["avg"], s[metric].get("peak")
        vs = None if i == b or not base_avg or avg is None else (avg / base_avg - 1.0) * 100.0
        out.append({"config": d.get("label"), "tok_s_avg": avg, "tok_s_peak": peak,
                    "accept_length": s.get("accept_length"),
                    "accept_source": s.get("accept_source"), "vs_baseline_pct": vs,
                    "is_baseline": i == b, "metric": metric})
    return out


def fmt_pct(row: dict[str, Any]) -> str:
    if row["is_baseline"]:
        return "—"
    v = row["vs_baseline_pct"]
    return "-" if v is None else f"{v:+.1f}%"


def _num(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table_lines(rs: list[dict[str, Any]]) -> list[list[str]]:
    """Cells as printed: config, tok/s avg, tok/s peak, accept len, vs baseline. A label is input:
    control characters (escape codes) are shown, not sent (console.clean)."""
    return [[clean(r["config"]), _num(r["tok_s_avg"]), _num(r["tok_s_peak"]),
             _num(r["accept_length"], 2), fmt_pct(r)] for r in rs]


def _md(cells: list[str]) -> list[str]:
    """Markdown cells: a "|" in a label would split the row."""
    return [c.replace("|", "\\|") for c in cells]


def markdown(rs: list[dict[str, Any]]) -> str:
    head = "| Config | tok/s (avg) | tok/s (peak) | accept len (incl. bonus) | vs baseline |"
    sep = "|---|:-:|:-:|:-:|:-:|"
    return "\n".join([head, sep] + ["| " + " | ".join(_md(c)) + " |" for c in table_lines(rs)])


# ---------------------------------------------------------------- ladders


def _sweep_ladders(data: Any) -> list[dict[str, Any]]:
    """The ladders of a steps x concurrency sweep's finished configs, labelled by config name."""
    if not isinstance(data, dict) or data.get("schema") != SWEEP_SCHEMA:
        return []
    configs = data.get("configs")
    if not isinstance(configs, list):
        return []
    return [{"label": str(c.get("name")), "baseline": bool(c.get("baseline")), "levels": c["ladder"]["levels"]}
            for c in configs if isinstance(c, dict) and c.get("status") == "ok"
            and isinstance(c.get("ladder"), dict) and isinstance(c["ladder"].get("levels"), list)]


def _scan_ladders(data: Any, origin: str) -> list[dict[str, Any]]:
    """A scan result as one ladder per step count (probe figures: steady cycles of each key at the
    level's batch size), plus the plain server's when the scan benched one (the baseline then)."""
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("eagle3_scan/"):
        return []
    from ..documents import scan_doc

    scan_doc.check(data, origin)  # the scan reader's typed check (every scan reader refuses alike)
    out = []
    cells = scan_doc.main_cells(data)
    states = {scan_doc.state_label(c): c["steps"] for c in cells}  # a tree is its own ladder, not its steps'
    for lab in sorted(states, key=lambda k: (not k.isdigit(), states[k], k)):
        levels = [{"concurrency": c["level"], "summary": {
            "per_stream_tok_s": c["per_stream_tok_s"], "throughput_tok_s": c["throughput_tok_s"],
            "ttft_s": None, "accept_length": c["accept_len"]}}
            for c in sorted(cells, key=lambda c: c["level"]) if scan_doc.state_label(c) == lab]
        s = states[lab]
        name = (f"tree {lab}" if not lab.isdigit() else
                scan_doc.STEP0_LABEL if s == 0 else f"{s} step{'s' if s > 1 else ''}")
        out.append({"label": f"scan {name} (probes, steady)", "baseline": False, "levels": levels})
    base = data.get("baseline") or {}
    if base:
        out.insert(0, {"label": "plain server (client)", "baseline": True, "levels": [
            {"concurrency": int(k), "summary": {"per_stream_tok_s": v.get("per_stream_tok_s"),
                                                "throughput_tok_s": v.get("throughput_tok_s"),
                                                "ttft_s": None, "accept_length": None}}
            for k, v in sorted(base.items(), key=lambda kv: int(kv[0]))]})
    return out


def _scan_path(p: str) -> str:
    q = Path(p)
    f = q / "scan.json"
    return str(f) if q.is_dir() and (f.exists() or f.is_symlink()) else p  # the reader says what it is


def is_ladder_set(paths: list[str]) -> bool:
    """True when the first file is a ladder, a sweep with ladders or a scan result (then every
    file must be one of those)."""
    data = _read(_scan_path(paths[0]))
    return isinstance(data, dict) and (data.get("schema") == LADDER_SCHEMA or bool(_sweep_ladders(data))
                                       or str(data.get("schema", "")).startswith("eagle3_scan/"))


def load_ladders(paths: list[str]) -> list[dict[str, Any]]:
    """Ladder documents from ladder files, steps x concurrency sweeps' results.json and scans."""
    from ..documents.bench_doc import load_ladder

    docs: list[dict[str, Any]] = []
    for p in map(_scan_path, paths):
        data = _read(p)
        for d in _sweep_ladders(data) or _scan_ladders(data, p) or [load_ladder(p)]:
            docs.append(_checked_ladder(p, d))
    return docs


_LEVEL_FIGURES = ("per_stream_tok_s", "throughput_tok_s", "ttft_s", "accept_length")


def _checked_ladder(p: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Each level: a concurrency (whole number >= 1) and a summary of finite figures >= 0."""
    levels = doc.get("levels")
    if not isinstance(levels, list):
        raise UserError(f"{p}: ladder 'levels' is not a list", exit_code=2)
    if doc.get("label") is not None and not isinstance(doc["label"], str):
        raise UserError(f"{p}: ladder label is not text", exit_code=2)
    for i, lv in enumerate(levels):
        s = lv.get("summary") if isinstance(lv, dict) else None
        n = lv.get("concurrency") if isinstance(lv, dict) else None
        if not isinstance(s, dict) or not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
            raise UserError(f"{p}: ladder level {i} needs a concurrency >= 1 and a summary object", exit_code=2)
        for k in _LEVEL_FIGURES:
            if not _num_or_none(s.get(k)):
                raise UserError(f"{p}: ladder level {i} summary.{k} is not a finite number >= 0 "
                                f"(got {s.get(k)!r:.40})", exit_code=2)
    return doc


def ladder_rows(docs: list[dict[str, Any]], baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per (concurrency level, ladder): per-stream and total tok/s, each vs the baseline
    ladder at the same level (levels the baseline lacks get no comparison)."""
    b = pick_baseline(docs, baseline)
    base = {lv["concurrency"]: lv["summary"] for lv in docs[b]["levels"]}
    levels = sorted({lv["concurrency"] for d in docs for lv in d["levels"]})

    def pct(v: float | None, ref: float | None) -> float | None:
        return None if v is None or not ref else (v / ref - 1.0) * 100.0

    out = []
    for n in levels:
        for i, d in enumerate(docs):
            s = next((lv["summary"] for lv in d["levels"] if lv["concurrency"] == n), None)
            if s is None:
                continue
            ref = base.get(n) or {}
            out.append({"concurrency": n, "config": d.get("label"), "is_baseline": i == b,
                        "per_stream_tok_s": s.get("per_stream_tok_s"),
                        "throughput_tok_s": s.get("throughput_tok_s"), "ttft_s": s.get("ttft_s"),
                        "accept_length": s.get("accept_length"),
                        "per_stream_vs_baseline_pct": None if i == b else pct(
                            s.get("per_stream_tok_s"), ref.get("per_stream_tok_s")),
                        "throughput_vs_baseline_pct": None if i == b else pct(
                            s.get("throughput_tok_s"), ref.get("throughput_tok_s"))})
    return out


def _p(row: dict[str, Any], key: str) -> str:
    if row["is_baseline"]:
        return "—"
    v = row[key]
    return "-" if v is None else f"{v:+.1f}%"


def ladder_cells(rs: list[dict[str, Any]]) -> list[list[str]]:
    return [[str(r["concurrency"]), clean(r["config"]), _num(r["per_stream_tok_s"]),
             _p(r, "per_stream_vs_baseline_pct"), _num(r["throughput_tok_s"]),
             _p(r, "throughput_vs_baseline_pct"),
             _num(r["ttft_s"] * 1000 if r["ttft_s"] is not None else None),
             _num(r["accept_length"], 2)] for r in rs]


LADDER_HEAD = ("concurrency", "config", "per stream tok/s", "vs base", "total tok/s", "vs base",
               "TTFT ms", "accept len")


def ladder_markdown(rs: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(LADDER_HEAD) + " |"
    sep = "|" + "|".join(["---"] * 2 + [":-:"] * (len(LADDER_HEAD) - 2)) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(_md(c)) + " |" for c in ladder_cells(rs)])


# ---------------------------------------------------------------- open-loop results


def is_serving_set(paths: list[str]) -> bool:
    """True when the first file is an open-loop result (then every file must be one)."""
    from ..documents.serving_doc import SCHEMA as SERVING_SCHEMA

    first = _scan_path(paths[0])
    if Path(first).is_dir():  # a folder: the ladder / scan readers say what it should hold
        return False
    data = _read(first)
    return isinstance(data, dict) and data.get("schema") == SERVING_SCHEMA


def load_serving_set(paths: list[str]) -> list[dict[str, Any]]:
    """Checked open-loop documents; refuses (one line) a run given twice (the same file, or a copy:
    the same measurements under any label) and a document whose counts contradict each other."""
    import hashlib
    import json

    from ..documents.serving_doc import SCHEMA as SERVING_SCHEMA
    from ..documents.serving_doc import check

    docs = []
    seen: dict[str, str] = {}  # hash of the measurements -> the file that held them first
    for p in paths:
        data = _read(p)
        if not isinstance(data, dict) or data.get("schema") != SERVING_SCHEMA:
            raise UserError(f"{p}: not an open-loop result ({SERVING_SCHEMA}); compare open-loop "
                            "results with open-loop results only", exit_code=2)
        check(data, str(p))
        if data.get("label") is not None and not isinstance(data["label"], str):
            raise UserError(f"{p}: label is not text", exit_code=2)
        _consistent(data, str(p))
        key = hashlib.sha256(json.dumps(data["rates"], sort_keys=True).encode()).hexdigest()
        if key in seen:
            same = "given twice" if Path(seen[key]).resolve() == Path(p).resolve() else f"a copy of {seen[key]}"
            raise UserError(f"{p}: {same} (the same measurements); each run counts once: give every "
                            "file once", exit_code=2)
        seen[key] = str(p)
        docs.append(data)
    return docs


_SLACK = 1e-3  # figures are rounded to 4 places when written


def _consistent(doc: dict[str, Any], origin: str) -> None:
    """Counts that contradict each other (more completed than sent, an attainment above 1,
    more good requests a second than completed ones) are no measurement: one line, exit 2."""
    for i, e in enumerate(doc["rates"], 1):
        s, where = e["summary"], f"{origin} rate {i}"
        sent, done, failed = s.get("sent"), s.get("completed"), s.get("failed")
        g = s.get("goodput") or {}
        why = None
        if sent is not None and done is not None and done > sent:
            why = f"summary.completed {done} > summary.sent {sent}"
        elif sent is not None and failed is not None and failed > sent:
            why = f"summary.failed {failed} > summary.sent {sent}"
        elif g.get("slo_attainment") is not None and g["slo_attainment"] > 1 + _SLACK:
            why = f"summary.goodput.slo_attainment {g['slo_attainment']} > 1 (a share of the requests sent)"
        elif (g.get("request_goodput") is not None and s.get("request_throughput") is not None
              and g["request_goodput"] > s["request_throughput"] * (1 + _SLACK) + _SLACK):
            why = (f"summary.goodput.request_goodput {g['request_goodput']} > request_throughput "
                   f"{s['request_throughput']} (good requests are completed ones)")
        if why:
            raise UserError(f"{where}: {why}: the document contradicts itself; not compared", exit_code=2)


# The open-loop parameters that change what is measured: runs that differ in one of these are
# different workloads, and their numbers are not comparable as one configuration against another.
WORKLOAD = ("max_tokens", "output_len", "ignore_eos", "api", "seed", "order", "prompts_file", "prompt_count",
            "burstiness", "max_concurrency", "slo_ms")


def workload_diffs(docs: list[dict[str, Any]], b: int) -> list[str]:
    """One line per document whose workload differs from the baseline's (parameters both record)."""
    ref = docs[b].get("params") or {}
    lines = []
    for d in docs:
        par = d.get("params") or {}
        diff = [f"{k} {par[k]!r:.60} vs {ref[k]!r:.60}" for k in WORKLOAD
                if k in par and k in ref and par[k] != ref[k]]
        if diff:
            lines.append(f"{clean(str(d.get('label')))}: another workload than the baseline "
                         f"{clean(str(docs[b].get('label')))} ({'; '.join(diff)})")
    return list(dict.fromkeys(lines))


def serving_rows(docs: list[dict[str, Any]], baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per (request rate, file): throughput, latency percentiles, goodput and accept
    length; output tok/s and median ITL against the baseline at the same rate: the baseline
    file's own run there, else the first file with the baseline's label that ran that rate (a
    campaign writes one file per label and rate, and ``--baseline LABEL`` names the label)."""
    b = pick_baseline(docs, baseline)
    order = sorted({e["request_rate"] for d in docs for e in d["rates"]},
                   key=lambda r: float("inf") if r == "inf" else r)
    base_at: dict[Any, int] = {}  # rate -> the index of the file that is the baseline there
    base: dict[Any, dict[str, Any]] = {}
    for i in (b, *range(len(docs))):
        if docs[i].get("label") == docs[b].get("label"):
            for e in docs[i]["rates"]:
                if e["request_rate"] not in base_at:
                    base_at[e["request_rate"]], base[e["request_rate"]] = i, e["summary"]

    def pct(v: float | None, ref: float | None) -> float | None:
        return None if v is None or not ref else round((v / ref - 1.0) * 100.0, 2)

    out = []
    for rate in order:
        for i, d in enumerate(docs):
            s = next((e["summary"] for e in d["rates"] if e["request_rate"] == rate), None)
            if s is None:
                continue
            ref = base.get(rate) or {}
            itl = (s.get("itl_ms") or {}).get("p50")
            g = s.get("goodput") or {}
            is_base = base_at.get(rate) == i
            out.append({"request_rate": rate, "config": d.get("label"), "is_baseline": is_base,
                        "completed": s.get("completed"), "sent": s.get("sent"), "failed": s.get("failed"),
                        "request_throughput": s.get("request_throughput"),
                        "output_throughput": s.get("output_throughput"),
                        "ttft_p50_ms": (s.get("ttft_ms") or {}).get("p50"),
                        "ttft_p99_ms": (s.get("ttft_ms") or {}).get("p99"),
                        "itl_p50_ms": itl, "itl_p99_ms": (s.get("itl_ms") or {}).get("p99"),
                        "tpot_p50_ms": (s.get("tpot_ms") or {}).get("p50"),
                        "request_goodput": g.get("request_goodput"), "slo_attainment": g.get("slo_attainment"),
                        "accept_length": s.get("accept_length"),
                        "output_vs_baseline_pct": None if is_base else pct(s.get("output_throughput"),
                                                                           ref.get("output_throughput")),
                        "itl_p50_vs_baseline_pct": None if is_base else pct(itl, (ref.get("itl_ms") or {}).get("p50"))})
    return out


SERVING_HEAD = ("rate /s", "config", "ok/sent", "req/s", "out tok/s", "vs base", "TTFT p50/p99 ms",
                "ITL p50/p99 ms", "vs base", "TPOT p50 ms", "goodput req/s", "accept len")


def serving_cells(rs: list[dict[str, Any]]) -> list[list[str]]:
    from ..documents.serving_doc import rate_label

    return [[rate_label(r["request_rate"]), clean(r["config"]), f"{r['completed']}/{r['sent']}",
             _num(r["request_throughput"], 2), _num(r["output_throughput"]), _p(r, "output_vs_baseline_pct"),
             f"{_num(r['ttft_p50_ms'])} / {_num(r['ttft_p99_ms'])}",
             f"{_num(r['itl_p50_ms'], 2)} / {_num(r['itl_p99_ms'], 2)}", _p(r, "itl_p50_vs_baseline_pct"),
             _num(r["tpot_p50_ms"], 2), _num(r["request_goodput"], 2), _num(r["accept_length"], 2)]
            for r in rs]


def serving_markdown(rs: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(SERVING_HEAD) + " |"
    sep = "|" + "|".join(["---"] * 2 + [":-:"] * (len(SERVING_HEAD) - 2)) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(_md(c)) + " |" for c in serving_cells(rs)])
