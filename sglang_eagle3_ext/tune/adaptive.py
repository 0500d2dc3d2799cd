"""SGLang's adaptive speculation config (``--speculative-adaptive-config``) from measurements.

SGLang 0.5.12+ can change the number of draft steps at run time (``--speculative-adaptive``,
topk 1 only). From 0.5.13 the config holds *tiers*: batch size -> ``candidate_steps``; a batch is
routed to the tier with the largest key <= its size (the smallest key below that), and inside a
tier the step count follows the acceptance EMA (``speculative/adaptive_spec_params.py``
``AdaptiveStepSlot``), never the cost of a step. So the tiers must already hold only step counts
that pay at that load. This module picks them from measured (or predicted) per-stream tok/s:

    candidates(tier) = { steps : tok_s(steps, tier) >= (1 - within/100) x best tok_s at the tier }

with steps 0 = no speculation (allowed from the release whose own loader accepts it: 0.5.16 and
later among the pinned ones; 0.5.13's ``_load_adaptive_config`` wants positive ints).

The written file is checked with the release's OWN loader: its functions are read from
``sglang/srt/speculative/adaptive_spec_params.py`` of the release in use and executed from
source (no SGLang import, so it works for any pinned tree on any machine).

Release formats (structure decides, by which loader the file defines):
- ``tiers`` (0.5.13+, ``_load_adaptive_config``): ``{"1": {"candidate_steps": [..]}, "8": ...}``;
- ``flat`` (0.5.12.post1, ``load_adaptive_config``): one ``{"candidate_steps": [..]}`` for every
  batch size, at least two distinct values (``AdaptiveSpeculativeParams.__init__`` assert).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError

# The release format, its loader check and the start-step rule live in adaptive_format (one home
# for launch, scan, this writer and the policy); re-exported here for older callers.
from ..serve.adaptive_format import (  # noqa: F401 - re-exports
    SPEC_FILE,
    ReleaseLoader,
    config_for_tiers,
    launch_steps,
    release_loader,
)

DEFAULT_WITHIN_PCT = 5.0

Table = dict[int, dict[int, float]]  # batch size (tier) -> steps -> per-stream tok/s


# ------------------------------------------------------------------ choosing candidates


@dataclass
class TierChoice:
    batch_size: int
    tok_s: dict[int, float]           # steps -> per-stream tok/s used
    best_steps: int
    candidates: list[int]
    note: str | None = None


def choose(table: Table, within_pct: float = DEFAULT_WITHIN_PCT, *,
           allows_zero: bool = True, keep: dict[int, list[int]] | None = None) -> list[TierChoice]:
    """Per tier, the step counts within ``within_pct`` % of the best per-stream tok/s; ``keep``:
    step counts a tier lists whatever their distance (a runner-up whose order against the best
    the scan did not decide: dropping it would pretend it did)."""
    if not 0 <= within_pct < 100:
        raise UserError(f"--within {within_pct}: a percentage in [0, 100)", exit_code=2)
    if not table:
        raise UserError("no measurements to choose tiers from", exit_code=2)
    out = []
    for bs in sorted(table):
        row = {s: v for s, v in table[bs].items() if v is not None and v > 0}
        if not row:
            continue
        best_s = max(row, key=lambda s: (row[s], -s))
        floor = row[best_s] * (1 - within_pct / 100.0)
        cands = sorted(s for s, v in row.items() if v >= floor)
        note = None
        extra = [s for s in (keep or {}).get(bs, []) if s in row and s not in cands]
        if extra:
            cands = sorted(cands + extra)
            note = (f"{', '.join(map(str, extra))} kept although more than {within_pct:g} % below the best: "
                    "the scan did not decide their order")
        if not allows_zero and 0 in cands:
            cands = [s for s in cands if s > 0]
            if not cands:
                pos = {s: v for s, v in row.items() if s > 0}
                if not pos:
                    continue
                cands = [max(pos, key=lambda s: (pos[s], -s))]
            note = "; ".join(x for x in (note, "no speculation is within reach here, but this release cannot "
                                         "switch it off per tier (its loader wants positive steps)") if x)
        out.append(TierChoice(bs, row, best_s, cands, note))
    if not out:
        raise UserError("no tier has a positive tok/s measurement", exit_code=2)
    return out


def config_for(choices: list[TierChoice], fmt: str) -> dict[str, Any]:
    """The JSON object SGLang reads, in the release's format (adaptive_format.config_for_tiers)."""
    return config_for_tiers({c.batch_size: c.candidates for c in choices}, fmt)


# ------------------------------------------------------------------ measurements in


def table_from_sweep(doc: dict[str, Any], predicted: bool = False
                     ) -> tuple[Table, dict[tuple[int, int], str]]:
    """(tier -> steps -> per-stream tok/s, (tier, steps) -> "measured" | "predicted") of a sweep.

    Measured: each ok topk-1 config's ladder levels (or its single bench at its concurrency);
    steps 0 = the no-spec configs. Several configs on one cell (NCCL variants): the fastest.
    With ``predicted``, the sweep analysis' per-tier predictions (probes + cost model) fill the
    cells that were not measured; off by default, because probe figures are steady-cycle rates
    and a client-measured cell beside a predicted one would not compare like with like.
    """
    table: Table = {}
    source: dict[tuple[int, int], str] = {}

    def put(bs: int, steps: int, v: float | None, how: str) -> None:
        if v is None:
            return
        cur = table.setdefault(bs, {}).get(steps)
        if how == "predicted" and (bs, steps) in source:
            return
        if cur is None or v > cur:
            table[bs][steps] = float(v)
            source[(bs, steps)] = how

    for c in doc.get("configs", []):
        if c.get("status") != "ok" or not c.get("bench"):
            continue
        if not c.get("baseline") and c.get("topk") not in (None, 1):
            continue
        if not c.get("baseline") and c.get("steps") is None:
            continue  # a speculative config without its step count: nothing to place
        steps = 0 if c.get("baseline") else int(c["steps"])
        ladder = c.get("ladder")
        if ladder:
            for lv in ladder["levels"]:
                put(int(lv["concurrency"]), steps, lv["summary"]["per_stream_tok_s"], "measured")
        else:
            b = c["bench"]
            put(int((b.get("params") or {}).get("concurrency") or 1), steps,
                b["summary"]["decode_tok_s"]["avg"], "measured")
    for r in (((doc.get("analysis") or {}).get("tiers") or {}).get("predicted", []) or []) if predicted else []:
        put(int(r["batch_size"]), int(r["steps"]), r.get("per_stream_tok_s"), "predicted")
    return table, source


def load_measurements(path: str | Path, predicted: bool = False
                      ) -> tuple[Table, dict[tuple[int, int], str], str]:
    """--from: a sweep folder or its results.json, or a scan folder or its scan.json."""
    from ..documents import scan_doc, sweep_doc

    p = Path(path)
    if scan_doc.is_scan(p):
        doc = scan_doc.load(p)
        table = scan_doc.table(doc)
        if not table:
            raise UserError(f"--from {path}: the scan has no measured cell at its levels' batch sizes", 2)
        return table, {(bs, s): "measured" for bs, row in table.items() for s in row}, str(p)
    f = p / "results.json" if p.is_dir() else p
    if not f.exists() and not f.is_symlink():
        raise UserError(f"--from {path}: no such file (a sweep folder or its results.json)", 2)
    doc = sweep_doc.load_results(f, missing_ok=False, folders=False)  # the one results reader: bounded, typed
    assert doc is not None
    table, source = table_from_sweep(doc, predicted)
    if not table:
        raise UserError(f"--from {f}: no finished topk-1 or no-spec configuration", exit_code=2)
    return table, source, str(f)


def write(table: Table, out: str | Path, loader: ReleaseLoader,
          within_pct: float = DEFAULT_WITHIN_PCT,
          write_json: Callable[[str | Path, Any], None] | None = None,
          keep: dict[int, list[int]] | None = None
          ) -> tuple[list[TierChoice], dict[str, Any], dict[int, list[int]]]:
    """Choose, write, and read back with the release's own loader; returns what it read."""
    from ..documents.jsonio import write_json as _wj

    choices = choose(table, within_pct, allows_zero=loader.allows_zero, keep=keep)
    cfg = config_for(choices, loader.format)
    outp = Path(out)
    if outp.is_dir():
        raise UserError(f"--out {out}: a directory; give a file name such as {outp / 'adaptive.json'}", 2)
    from ..documents.outputs import WriteFailed

    try:
        (write_json or _wj)(outp, cfg)
    except WriteFailed as exc:  # the caller prints the config instead (nothing measured is lost)
        exc.result = json.dumps(cfg, indent=2) + "\n"
        raise
    try:
        read = loader.load(outp)
    except (ValueError, AssertionError, KeyError, TypeError) as exc:
        raise UserError(f"{outp}: the release's own loader ({loader.source}) refuses it: {exc}") from exc
    return choices, cfg, read
