"""The scan's cells against separately started servers, from committed data (no GPU, no timing).

Input: a campaign folder with ``scan/`` (scan.json, ladder.json of one `sgl-eagle3 scan`) and
``static/`` (a `sweep` of separately started servers at the same loads: results.json and
configs/<slug>/{ladder.json, prof.jsonl}); default docs/data/h200-2026-12-01-r4/scan-8b.

Like with like, per (steps, load):
- the scan's figure is its cell: steady probe cycles of that key (steps, batch size = load);
- the static server's figure at 8 and 32 streams is its own steady probe cycles at that batch size
  (accounting.by_batch_summary of its prof.jsonl); at 1 stream its client's aggregate (decode
  tokens / decode s over the level's requests), because the static file's bs-1 entry also holds the
  drain cycles of the 8 and 32 stream levels (printed beside it, marked);
- accept length: the scan's probes against the static server's SGLang counters (its client's
  accept_length, from /metrics) and its probes;
- step 0 against the plain server: the scan's step-0 cell against the plain server's client
  aggregate (the plain server has no probes);
- wall time: the scan's own start_s / wall_s against the separate servers' start times (from the
  campaign log: they were started one after the other) and bench times (results.json elapsed_s).

Run: python benchmarks/scan_vs_static.py [DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sglang_eagle3_ext.documents import bench_doc, prof_records, scan_doc, sweep_doc  # noqa: E402
from sglang_eagle3_ext.measure import accounting  # noqa: E402
from sglang_eagle3_ext.runtime.errors import UserError  # noqa: E402

DEFAULT = ROOT / "docs" / "data" / "h200-2026-12-01-r4" / "scan-8b"


def _pct(a: float | None, b: float | None) -> float | None:
    return round((a / b - 1) * 100, 2) if (a and b) else None


def static_servers(static: Path) -> list[dict[str, Any]]:
    """Every separately started server: steps (None = plain), its ladder levels and probe split."""
    res = sweep_doc.load_results(static / "results.json", missing_ok=False)  # the one reader: one line if bad
    assert res is not None
    out = []
    for c in res["configs"]:
        d = static / "configs" / c["slug"]
        lad = bench_doc.load_ladder(d / "ladder.json")
        prof = d / "prof.jsonl"
        by_batch = accounting.by_batch_summary(prof_records.load(prof).records) if prof.is_file() else {}
        levels = {}
        for lv in lad["levels"]:
            agg = scan_doc.client_aggregate(lv["bench"])
            levels[int(lv["concurrency"])] = {
                "client_aggregate": agg["per_stream_tok_s"] if agg else None,
                "client_mean": lv["summary"]["per_stream_tok_s"],
                "accept_length": lv["summary"].get("accept_length"),
                "accept_source": lv["summary"].get("accept_source")}
        out.append({"name": c["name"], "steps": c.get("steps"), "baseline": bool(c.get("baseline")),
                    "elapsed_s": c.get("elapsed_s"), "levels": levels, "by_batch": by_batch})
    return out


def campaign_starts(log: Path) -> dict[str, Any] | None:
    """The separate servers' start times from the campaign log: the first server's own health
    time, then the rest together (started one after the other)."""
    if not log.is_file():
        return None
    text = log.read_text()
    first = re.search(r"\[campaign\s+([\d.]+)s\] \S+ healthy in ([\d.]+) s \(first server\)", text)
    alln = re.search(r"\[campaign\s+([\d.]+)s\] (\d+)/(\d+) servers healthy", text)
    if not (first and alln):
        return None
    rest = float(alln.group(1)) - float(first.group(1))
    n = int(alln.group(3))
    return {"first_s": float(first.group(2)), "rest_s": round(rest, 1), "rest_servers": n - 1,
            "per_server_s": round(rest / (n - 1), 1) if n > 1 else None}


def compare(folder: Path) -> dict[str, Any]:
    doc = scan_doc.load(folder / "scan")
    cells = {(c["steps"], c["bs"]): c for c in scan_doc.main_cells(doc)}
    servers = static_servers(folder / "static")
    rows = []
    for srv in servers:
        if srv["steps"] is None:
            continue
        for n, lv in sorted(srv["levels"].items()):
            c = cells.get((srv["steps"], n)) or {}
            bb = srv["by_batch"].get(n) or {}
            ref, ref_name = ((lv["client_aggregate"], "client aggregate") if n == 1
                             else (bb.get("per_stream_tok_s"), f"probes bs {n}"))
            rows.append({"steps": srv["steps"], "streams": n, "scan": c.get("per_stream_tok_s"),
                         "scan_cycles": c.get("cycles"), "static": ref, "static_basis": ref_name,
                         "diff_pct": _pct(c.get("per_stream_tok_s"), ref),
                         "static_probes": bb.get("per_stream_tok_s"), "static_probes_drain_mixed": n == 1,
                         "static_client_aggregate": lv["client_aggregate"], "static_client_mean": lv["client_mean"],
                         "scan_accept": c.get("accept_len"), "static_accept_sglang": lv["accept_length"],
                         "static_accept_probes": bb.get("accept_len"),
                         "accept_diff_pct": _pct(c.get("accept_len"), lv["accept_length"]),
                         "holds": _holds(c, ref, lv["accept_length"])})
    plain = next((s for s in servers if s["steps"] is None), None)
    step0 = []
    for n in doc["levels"]:
        c = cells.get((0, n)) or {}
        p = (plain or {}).get("levels", {}).get(n) or {}
        step0.append({"streams": n, "scan_step0": c.get("per_stream_tok_s"), "plain_aggregate": p.get("client_aggregate"),
                      "plain_mean": p.get("client_mean"), "diff_pct": _pct(c.get("per_stream_tok_s"),
                                                                           p.get("client_aggregate"))})
    best = {}
    for n in doc["levels"]:
        static_best = max(((s["steps"], r["static"]) for s in servers if s["steps"] is not None
                           for r in rows if r["steps"] == s["steps"] and r["streams"] == n and r["static"]),
                          key=lambda t: t[1], default=(None, None))
        scan_pair = max(((r["steps"], r["scan"]) for r in rows if r["streams"] == n and r["scan"]),
                        key=lambda t: t[1], default=(None, None))
        best[n] = {"scan_over_all": (doc.get("best") or {}).get(str(n), {}).get("steps"),
                   "scan_among_static": scan_pair[0], "static": static_best[0]}
    starts = campaign_starts(folder / "campaign-log.txt")
    benches = [s["elapsed_s"] for s in servers if s["elapsed_s"] is not None]
    wall = {"scan_start_s": doc.get("start_s"), "scan_wall_s": doc.get("wall_s"),
            "scan_states": len(doc["candidates"]), "scan_levels": len(doc["levels"]),
            "static_starts": starts, "static_bench_s": benches, "static_servers": len(servers)}
    if starts and starts.get("per_server_s"):
        spec = [s["elapsed_s"] for s in servers if s["steps"] is not None and s["elapsed_s"] is not None]
        per_bench = sum(spec) / len(spec) if spec else 0.0
        wall["sweep_same_grid_s"] = round(len(doc["candidates"]) * (starts["per_server_s"] + per_bench), 1)
        wall["sweep_same_grid_basis"] = (f"{len(doc['candidates'])} servers x (start {starts['per_server_s']:.1f} s + "
                                         f"bench {per_bench:.1f} s), the measured means of the spec servers here")
    return {"rows": rows, "step0": step0, "best": best, "wall": wall,
            "twin": [scan_doc.twin(doc, n) for n in doc["levels"]]}


def _f(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _holds(c: dict[str, Any], tok_s: float | None, accept: float | None) -> dict[str, bool | None]:
    """Does the cell's 95 % interval hold the static server's figure (None: no interval or figure;
    scans before issue 33 have no accept-length interval)."""
    iv = c.get("interval") or {}
    out: dict[str, bool | None] = {}
    for k, ref in (("per_stream_tok_s", tok_s), ("accept_len", accept)):
        lo_hi = iv.get(k)
        out[k] = None if (not lo_hi or ref is None) else bool(lo_hi[0] <= ref <= lo_hi[1])
    return out


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def render(res: dict[str, Any]) -> str:
    lines = ["per cell: the scan (one server, held steps; steady probe cycles of the key) vs a separately started "
             "server of those steps",
             "| steps | streams | scan tok/s per stream (cycles) | static (basis) | scan vs static | static probes "
             "at bs | static client aggregate / mean | accept len scan / static SGLang / static probes |",
             "|:-:|:-:|:-:|:-:|:-:|:-:|:-:|:-:|"]
    for r in res["rows"]:
        sp = _f(r["static_probes"]) + (" (incl. drain cycles of 8/32)" if r["static_probes_drain_mixed"] else "")
        lines.append(f"| {r['steps']} | {r['streams']} | {_f(r['scan'])} ({r['scan_cycles'] or 0}) | {_f(r['static'])} "
                     f"({r['static_basis']}) | {_p(r['diff_pct'])} | {sp} | {_f(r['static_client_aggregate'])} / "
                     f"{_f(r['static_client_mean'])} | {_f(r['scan_accept'], '.2f')} / "
                     f"{_f(r['static_accept_sglang'], '.2f')} / {_f(r['static_accept_probes'], '.2f')} |")
    for k, name in (("per_stream_tok_s", "tok/s (the static figure above)"), ("accept_len", "accept len (SGLang's counter)")):
        got = [r for r in res["rows"] if r.get("holds", {}).get(k) is not None]
        if got:
            miss = [f"{r['steps']} steps x {r['streams']}" for r in got if not r["holds"][k]]
            lines.append(f"cells whose 95 % interval holds the static {name}: {len(got) - len(miss)} of {len(got)}"
                         + (f" (not: {', '.join(miss)})" if miss else ""))
    lines += ["", "step 0 (SGLang's 0-step state, scan probes) vs the plain server (no speculation; client aggregate)",
              "| streams | scan step 0 | plain aggregate / mean | step 0 vs plain |", "|:-:|:-:|:-:|:-:|"]
    for r in res["step0"]:
        lines.append(f"| {r['streams']} | {_f(r['scan_step0'])} | {_f(r['plain_aggregate'])} / {_f(r['plain_mean'])} | "
                     f"{_p(r['diff_pct'])} |")
    lines += ["", "best step count per load: scan over all its candidates / scan among the static servers' steps / "
                  "static servers"]
    for n, b in res["best"].items():
        lines.append(f"  {n} stream(s): {b['scan_over_all']} / {b['scan_among_static']} / {b['static']}")
    lines += ["", "outside twin per level (the scan's client aggregate vs its probes, all steps together)"]
    for t in res["twin"]:
        if t:
            lines.append(f"  {t['level']} stream(s): client aggregate {_f((t['client_aggregate'] or {}).get('per_stream_tok_s'))}"
                         f" (mean {_f(t['client_mean'])}) vs probes {_f((t['probes'] or {}).get('per_stream_tok_s'))}: "
                         f"{_p(t['probes_vs_client_pct'])}")
    w = res["wall"]
    st = w.get("static_starts") or {}
    lines += ["", f"wall time: the scan started one server with {w['scan_states']} states in {_f(w['scan_start_s'], '.0f')} s"
                  f" and measured {w['scan_states']} steps x {w['scan_levels']} loads in {_f(w['scan_wall_s'], '.0f')} s "
                  f"in all (start included)"]
    if st:
        lines.append(f"  separate servers ({w['static_servers']}, started one after the other): the first (plain) "
                     f"{st['first_s']:.0f} s, the other {st['rest_servers']} {st['rest_s']:.0f} s together "
                     f"({_f(st['per_server_s'])} s each); their benches {', '.join(f'{b:.1f}' for b in w['static_bench_s'])} s")
    if w.get("sweep_same_grid_s"):
        lines.append(f"  the same grid by separate servers: ~{w['sweep_same_grid_s']:.0f} s ({w['sweep_same_grid_basis']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=str(DEFAULT))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        res = compare(Path(a.folder))
    except UserError as exc:
        print(f"scan_vs_static: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=2, default=str) if a.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
