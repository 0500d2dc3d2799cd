"""The seeds' comparison table from bench result documents (or a sweep's results.json).

| config | tok/s (avg) | tok/s (peak) | accept len | vs baseline |

tok/s is decode tok/s per stream (tokens after the first over the time after the first) unless
another summary metric is asked; "vs baseline" = avg / baseline avg - 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .bench import SCHEMA as BENCH_SCHEMA
from .bench import read_json
from .errors import UserError

SWEEP_SCHEMA = "eagle3_sweep/1"
METRICS = ("decode_tok_s", "e2e_tok_s", "throughput_tok_s")


def _num_or_none(x: Any) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _checked(p: Path, doc: Any, where: str) -> dict[str, Any]:
    """A bench document with the fields the table reads; one line naming the first missing one."""
    summary = doc.get("summary") if isinstance(doc, dict) else None
    if not isinstance(summary, dict):
        raise UserError(f"{p}: {where} has no 'summary' object", exit_code=2)
    for m in METRICS:
        v = summary.get(m)
        if v is None:
            continue
        if not isinstance(v, dict) or not all(k in v and _num_or_none(v[k]) for k in ("avg", "peak")):
            raise UserError(f"{p}: {where} summary.{m} needs numeric 'avg' and 'peak'", exit_code=2)
    if not _num_or_none(summary.get("accept_length")):
        raise UserError(f"{p}: {where} summary.accept_length is not a number", exit_code=2)
    if doc.get("label") is not None and not isinstance(doc["label"], str):
        raise UserError(f"{p}: {where} label is not text", exit_code=2)
    return doc


def load(paths: list[str]) -> list[dict[str, Any]]:
    """Bench documents from bench files and sweep results files, in the order given."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            raise UserError(f"{p}: is a folder; give bench result files (or a sweep's results.json)",
                            exit_code=2)
        try:
            data = read_json(p)
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{p}: cannot read it ({getattr(exc, 'strerror', None) or exc})",
                            exit_code=2) from None
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == BENCH_SCHEMA:
            docs.append(_checked(p, data, "the result"))
        elif schema == SWEEP_SCHEMA:
            configs = data.get("configs", [])
            if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
                raise UserError(f"{p}: 'configs' is not a list of objects", exit_code=2)
            for c in configs:
                if c.get("status") == "ok" and c.get("bench"):
                    doc = dict(_checked(p, c["bench"], f"config {c.get('name')!r}"))
                    doc["label"] = str(c.get("name"))
                    doc["baseline"] = bool(c.get("baseline"))
                    docs.append(doc)
        else:
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
        avg, peak = s[metric]["avg"], s[metric]["peak"]
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
    """Cells as printed: config, tok/s avg, tok/s peak, accept len, vs baseline."""
    return [[str(r["config"]), _num(r["tok_s_avg"]), _num(r["tok_s_peak"]),
             _num(r["accept_length"], 2), fmt_pct(r)] for r in rs]


def markdown(rs: list[dict[str, Any]]) -> str:
    head = "| Config | tok/s (avg) | tok/s (peak) | accept len (incl. bonus) | vs baseline |"
    sep = "|---|:-:|:-:|:-:|:-:|"
    return "\n".join([head, sep] + ["| " + " | ".join(c) + " |" for c in table_lines(rs)])


def rich_table(rs: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    metric = rs[0]["metric"] if rs else "decode_tok_s"
    t = Table(title=f"tok/s = {metric.replace('_tok_s', '')} tok/s per stream; accept len incl. bonus",
              title_justify="left")
    t.add_column("Config")
    for c in ("tok/s (avg)", "tok/s (peak)", "accept len", "vs baseline"):
        t.add_column(c, justify="right")
    for cells in table_lines(rs):
        t.add_row(*cells)
    return t
