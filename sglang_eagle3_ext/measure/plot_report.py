"""`report`'s page: what a scan folder, a sweep folder or a set of bench files measured, as tables
and pictures on one self-contained HTML page (documents/report_html.py writes the markup).

A folder holding scan.json or results.json is that scan or sweep. Any other folder is searched
(sorted, at most MAX_FILES JSON files) for results of ours by their schema; the files inside a
scan's or a sweep's folder belong to it and are not listed again. Files given one by one are
sorted the same way. Without matplotlib the page still has every table, and says why the
pictures are missing.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..documents import report_html as h
from ..runtime.errors import UserError

MAX_FILES = 2000
KINDS = ("scan", "sweep", "serving", "ladder", "bench")
_SCHEMA = re.compile(r'"schema"\s*:\s*"eagle3_(scan|sweep|serving|ladder|bench)/')
TITLES = {"serving": "open-loop bench", "ladder": "concurrency ladders", "bench": "bench results"}


@dataclass
class Report:
    html: str
    kinds: list[str]
    tables: int = 0
    pictures: int = 0
    notes: list[str] = field(default_factory=list)


def kind_of(path: Path) -> str | None:
    """The result kind a JSON file holds, from the top-level schema near its start (None: not ours,
    or not a regular file: a FIFO named *.json would block the read)."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(4000).decode("utf-8", errors="replace")
    except OSError:
        return None
    m = _SCHEMA.search(head)
    return m.group(1) if m else None


def gather(paths: list[str]) -> list[tuple[str, list[Path]]]:
    """[(kind, files)] in KINDS order: one entry per scan and per sweep, one per set of the others."""
    found: dict[str, list[Path]] = {k: [] for k in KINDS}
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            if (p / "scan.json").is_file():
                found["scan"].append(p / "scan.json")
            elif (p / "results.json").is_file():
                found["sweep"].append(p / "results.json")
            else:
                _search(p, found)
        elif p.is_file():
            k = kind_of(p)
            if k is None:
                raise UserError(f"{raw}: not a result of sgl-eagle3 (no eagle3_scan / sweep / serving / ladder / "
                                "bench schema near its start)", exit_code=2)
            found[k].append(p)
        elif p.exists():
            raise UserError(f"{raw}: not a regular file or a folder (a FIFO or a device is not read)", exit_code=2)
        else:
            raise UserError(f"{raw}: no such file or folder", exit_code=2)
    out: list[tuple[str, list[Path]]] = []
    for k in KINDS:
        if k in ("scan", "sweep"):
            out += [(k, [f]) for f in found[k]]
        elif found[k]:
            out.append((k, found[k]))
    if not out:
        raise UserError(f"{', '.join(paths)}: no scan.json, sweep results.json or bench result files found", 2)
    return out


def _search(folder: Path, found: dict[str, list[Path]]) -> None:
    files: list[Path] = []
    for f in folder.rglob("*.json"):  # symlinked folders are not followed (no loops)
        files.append(f)
        if len(files) > MAX_FILES:
            raise UserError(f"{folder}: more than {MAX_FILES} JSON files below it; give a smaller folder or the "
                            "files themselves", exit_code=2)
    files.sort()
    owned = {f.parent for f in files if f.name in ("scan.json", "results.json")}
    for f in files:
        if f.parent in owned and f.name not in ("scan.json", "results.json"):
            continue  # a scan's ladder.json, a sweep's table: part of that result
        if any(d in owned for d in f.parents) and f.parent not in owned:
            continue  # a sweep's configs/<name>/bench.json
        k = kind_of(f)
        if k:
            found[k].append(f)


class _Pictures:
    """Draws each picture into memory; without matplotlib (or when one fails) one note instead."""

    def __init__(self, report: Report) -> None:
        from .plot_base import missing_reason

        self.report = report
        self.why = missing_reason()
        if self.why:
            report.notes.append(f"pictures left out: {self.why}")

    def __call__(self, draw: Any, alt: str, caption: str, *args: Any) -> str:
        if self.why:
            return ""
        buf = io.BytesIO()
        try:
            made = draw(*args, buf)
        except UserError as exc:
            self.report.notes.append(f"{alt}: not drawn ({exc})")
            return h.note(f"{alt}: not drawn ({exc})")
        if made is None:
            return ""
        self.report.pictures += 1
        return h.picture(buf.getvalue(), alt, caption)


def _n(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _table(report: Report, *args: Any, **kw: Any) -> str:
    report.tables += 1
    return h.table(*args, **kw)


# ---------------------------------------------------------------- one section per kind


def scan_section(path: Path, report: Report, pics: _Pictures) -> str:
    from ..documents import scan_doc
    from . import compare
    from .plot import plot_ladders
    from .plot_scan import grid, plot_scan, state_label, state_order

    doc = scan_doc.load(path)
    g = grid(doc)
    base = doc.get("baseline") or {}
    rows, cls = [], []
    for c in sorted(scan_doc.main_cells(doc), key=lambda c: (c["bs"], state_order(c))):
        iv = (c.get("interval") or {}).get("per_stream_tok_s")
        ref = (base.get(str(c["bs"])) or {}).get("per_stream_tok_s")
        rate = scan_doc.cell_rate(c)
        rows.append([c["bs"], state_label(c), f"{c['cycles']} / {c['blocks']}", _n(c.get("cycle_ms"), 2),
                     _n(c.get("accept_len"), 2), _n(rate) + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else ""),
                     _n(c.get("throughput_tok_s")), f"{(rate / ref - 1) * 100:+.1f}%" if ref and rate else "-"])
        cls.append("best" if g["best"].get(c["bs"]) == state_label(c) else "")
    for k, v in sorted(base.items(), key=lambda kv: int(kv[0])):
        rows.append([k, "plain server (no speculation)", "client", "-", "-", _n(v["per_stream_tok_s"]),
                     _n(v["throughput_tok_s"]), "—"])
        cls.append("base")
    best_rows = [[bs, s, _n(g["rate"][(s, bs)]),
                  f"{(g['rate'][(s, bs)] / g['plain'][bs] - 1) * 100:+.1f}%" if bs in g["plain"] else "-"]
                 for bs, s in g["best"].items()]
    ad = doc.get("adaptive") or {}
    parts = [h.facts([("file", path), ("model", doc.get("model")), ("draft", doc.get("draft")),
                      ("SGLang", doc.get("sglang_version")), ("states", ", ".join(g["states"])),
                      ("batch sizes", ", ".join(map(str, doc.get("levels") or []))),
                      ("hold block", f"{doc['block']} cycles" if doc.get("block") else None),
                      ("started", doc.get("started")), ("wall", f"{doc['wall_s']:.0f} s" if doc.get("wall_s") else None),
                      ("interrupted", "yes: figures are what was measured before the stop"
                       if doc.get("interrupted") else None)]),
             pics(plot_scan, "scan grid", "per-stream tok/s of each state at each batch size (steady decode "
                  "cycles); the boxed cell is the batch size's best", doc),
             _table(report, ["batch size", "best state", "tok/s per stream", "vs plain"], best_rows,
                    caption="best static state per batch size (tier)", left=(1,)),
             _table(report, ["batch size", "state", "cycles / blocks", "cycle ms", "accept len",
                             "tok/s per stream [95% over blocks]", "tok/s total", "vs plain"], rows,
                    caption="every state at each level's batch size (accept length incl. the bonus token)",
                    left=(1,), row_class=cls)]
    if ad:
        tiers = "; ".join(f"batch size {k}: steps {', '.join(map(str, v))}" for k, v in (ad.get("tiers") or {}).items())
        parts.append(h.facts([("adaptive config", ad.get("path")), ("tiers", tiers),
                              ("within", f"{ad.get('within_pct')} % of a tier's best"),
                              ("launch steps", ad.get("launch_steps"))]))
    ladders = compare._scan_ladders(doc, str(path))
    if ladders:
        parts.append(pics(plot_ladders, "scan ladder", "the same cells as a ladder: one line per state", ladders))
    parts += [h.note(f"note: {n}") for n in doc.get("notes") or []]
    return h.section(f"scan: {path.parent.name if path.name == 'scan.json' else path.stem}", parts)


def sweep_section(path: Path, report: Report, pics: _Pictures) -> str:
    from ..documents.sweep_doc import load_results
    from . import compare
    from .plot import plot_ladders, plot_phases, plot_tok_s

    doc = load_results(path, missing_ok=False, folders=False) or {}
    ok = [c for c in doc["configs"] if c.get("status") == "ok"]
    failed = [c for c in doc["configs"] if c.get("status") != "ok"]
    parts = [h.facts([("file", path), ("name", doc.get("name")), ("sweep file", doc.get("sweep_file")),
                      ("configs", f"{len(ok)} ok, {len(failed)} not"), ("started", doc.get("started")),
                      ("updated", doc.get("updated"))])]
    if any(c.get("bench") for c in ok):
        rs = compare.rows(compare.load([str(path)]))
        parts.append(_table(report, ["config", "tok/s (avg)", "tok/s (peak)", "accept len", "vs baseline"],
                            compare.table_lines(rs), caption="decode tok/s per stream; accept length incl. bonus",
                            row_class=["base" if r["is_baseline"] else "" for r in rs]))
        parts.append(pics(plot_tok_s, "decode tok/s per config", "bar = average, tick = peak; dashed = the "
                          "no-spec baseline", doc))
        parts.append(pics(plot_phases, "cycle phases", "mean ms per decode cycle from the probes", doc))
    ladders = compare._sweep_ladders(doc)
    if ladders:
        lr = compare.ladder_rows(ladders)
        parts.append(pics(plot_ladders, "concurrency ladder", "per-stream and total tok/s against concurrency",
                          ladders))
        parts.append(_table(report, compare.LADDER_HEAD, compare.ladder_cells(lr), left=(1,),
                            caption="per concurrency level, against the baseline ladder at the same level",
                            row_class=["base" if r["is_baseline"] else "" for r in lr]))
    for c in failed:
        parts.append(h.note(f"failed: {c.get('name')}: {c.get('error') or c.get('status')}"))
    return h.section(f"sweep: {doc.get('name') or path.parent.name}", parts)


def serving_section(files: list[Path], report: Report, pics: _Pictures) -> str:
    from . import compare
    from .plot_serving import plot_serving

    docs = compare.load_serving_set([str(f) for f in files])
    rs = compare.serving_rows(docs)
    labels = sorted({str(d.get("label")) for d in docs})
    parts = [h.facts([("files", len(files)), ("configs", ", ".join(labels)),
                      ("models", ", ".join(sorted({str(d.get('model')) for d in docs})))]),
             pics(plot_serving, "latency and goodput against the request rate", "p50 solid, p99 dashed; runs of "
                  "a config at one rate averaged", docs),
             _table(report, compare.SERVING_HEAD, compare.serving_cells(rs), left=(1,),
                    caption="one row per request rate and file; vs base: the baseline config at the same rate",
                    row_class=["base" if r["is_baseline"] else "" for r in rs])]
    return h.section(f"{TITLES['serving']}: {len(files)} file(s)", parts)


def ladder_section(files: list[Path], report: Report, pics: _Pictures) -> str:
    from . import compare
    from .plot import plot_ladders

    docs = compare.load_ladders([str(f) for f in files])
    lr = compare.ladder_rows(docs)
    parts = [pics(plot_ladders, "concurrency ladder", "per-stream and total tok/s against concurrency", docs),
             _table(report, compare.LADDER_HEAD, compare.ladder_cells(lr), left=(1,),
                    row_class=["base" if r["is_baseline"] else "" for r in lr])]
    return h.section(f"{TITLES['ladder']}: {len(files)} file(s)", parts)


def bench_section(files: list[Path], report: Report, pics: _Pictures) -> str:
    from . import compare
    from .plot import plot_tok_s

    docs = compare.load([str(f) for f in files])
    rs = compare.rows(docs)
    as_sweep = {"name": "bench", "configs": [{"name": str(r["config"]), "status": "ok", "bench": d,
                                              "baseline": r["is_baseline"]} for r, d in zip(rs, docs, strict=True)]}
    parts = [pics(plot_tok_s, "decode tok/s per result", "bar = average, tick = peak", as_sweep),
             _table(report, ["config", "tok/s (avg)", "tok/s (peak)", "accept len", "vs baseline"],
                    compare.table_lines(rs), row_class=["base" if r["is_baseline"] else "" for r in rs])]
    return h.section(f"{TITLES['bench']}: {len(files)} file(s)", parts)


def build(paths: list[str], title: str | None = None) -> Report:
    """The whole page; UserError (one line) for a path that holds nothing of ours or a bad file."""
    from .. import __version__

    groups = gather(paths)
    report = Report(html="", kinds=[k for k, _ in groups])
    pics = _Pictures(report)
    sections = []
    for kind, files in groups:
        if kind == "scan":
            sections.append(scan_section(files[0], report, pics))
        elif kind == "sweep":
            sections.append(sweep_section(files[0], report, pics))
        else:
            sections.append({"serving": serving_section, "ladder": ladder_section,
                              "bench": bench_section}[kind](files, report, pics))
    head = [h.note(n) for n in report.notes if n.startswith("pictures left out")]
    name = title or "sgl-eagle3 report: " + ", ".join(Path(p).name or p for p in paths)
    report.html = h.page(name, f"written by sgl-eagle3 {__version__} from {', '.join(paths)}", [*head, *sections])
    return report
