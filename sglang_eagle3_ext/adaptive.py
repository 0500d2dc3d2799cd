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

import ast
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .safeparse import json_loads

SPEC_FILE = "srt/speculative/adaptive_spec_params.py"
DEFAULT_WITHIN_PCT = 5.0

Table = dict[int, dict[int, float]]  # batch size (tier) -> steps -> per-stream tok/s


# ------------------------------------------------------------------ the release's own loader


@dataclass
class ReleaseLoader:
    """The adaptive-config loader of one SGLang tree, executed from its source."""

    package_dir: Path
    format: str                       # "tiers" | "flat"
    allows_zero: bool
    _ns: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def source(self) -> str:
        fn = "_load_adaptive_config" if self.format == "tiers" else "load_adaptive_config"
        return f"{self.package_dir / SPEC_FILE} {fn}"

    def load(self, path: str | Path) -> dict[int, list[int]]:
        """Tiers as the release reads them: {batch size: sorted candidate steps}.

        ``flat`` files give one tier, key 1 (they apply to every batch size). Raises the
        release's own ValueError/AssertionError for a file it refuses.
        """
        if self.format == "tiers":
            _, entries = self._ns["_load_adaptive_config"](str(path))
            return {int(k): sorted(set(v["candidate_steps"])) for k, v in entries.items()}
        cfg = self._ns["load_adaptive_config"](str(path))
        steps = cfg.get("candidate_steps", [1, 3, 7])
        # The class's own constructor holds the remaining rule (>= 2 distinct values once the
        # initial step is added); run it with the initial step we would launch with.
        self._ns["AdaptiveSpeculativeParams"](max(steps) if steps else 1, cfg)
        return {1: sorted(set(steps))}

    def defaults(self) -> dict[int, list[int]]:
        """The tiers the release uses without a config file (``DEFAULT_ADAPTIVE_CONFIG``)."""
        if self.format == "tiers":
            _, entries = self._ns["_load_adaptive_config"](None)
            return {int(k): sorted(set(v["candidate_steps"])) for k, v in entries.items()}
        return {1: [1, 3, 7]}  # 0.5.12.post1 AdaptiveSpeculativeParams: cfg.get("candidate_steps", [1, 3, 7])

    def format_mismatch(self, path: str | Path) -> str | None:
        """Why a file in the other release family's format would be misread, or None.

        0.5.12.post1 reads a tiered file without complaint and ignores its tiers (it only looks
        for a top-level ``candidate_steps``), so this is checked here, not left to its loader.
        """
        try:
            data = json_loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # the loader itself reports unreadable files
        if not isinstance(data, dict):
            return None
        tiered = any(str(k).isdigit() for k in data)
        if self.format == "flat" and tiered:
            return ("it has per-batch-size tiers (the 0.5.13+ format); this release reads one "
                    "top-level candidate_steps list and would ignore them")
        return None


def _pick(tree: ast.Module, names: set[str]) -> ast.Module:
    body = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            body.append(node)
        elif (isinstance(node, (ast.Assign, ast.AnnAssign))
              and any(isinstance(t, ast.Name) and t.id in names
                      for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
            body.append(node)
    return ast.Module(body=body, type_ignores=[])


def release_loader(package_dir: str | Path) -> ReleaseLoader:
    """The loader of the tree at ``package_dir`` (the ``sglang/`` folder); UserError when the
    release has no adaptive speculation (before 0.5.12)."""
    pkg = Path(package_dir)
    f = pkg / SPEC_FILE
    if not f.is_file():
        raise UserError(f"this SGLang ({pkg}) has no {SPEC_FILE}: adaptive speculation needs "
                        f"SGLang 0.5.12 or later", exit_code=2)
    tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

    def _noop(*_a: Any, **_k: Any) -> None:
        return None

    ns: dict[str, Any] = {"__name__": "sglang_adaptive_from_source", "json": json,
                          "logger": logging.getLogger("sglang_eagle3_ext.adaptive"),
                          "log_info_on_rank0": _noop, "__builtins__": __builtins__}
    if "_load_adaptive_config" in defined:
        fmt, names = "tiers", {"_load_adaptive_config", "DEFAULT_ADAPTIVE_CONFIG"}
    elif "load_adaptive_config" in defined:
        fmt, names = "flat", {"load_adaptive_config", "AdaptiveSpeculativeParams"}
    else:
        raise UserError(f"{f}: neither _load_adaptive_config nor load_adaptive_config; "
                        f"this release's adaptive config format is unknown to us", exit_code=2)
    code = compile(_pick(tree, names), str(f), "exec")
    exec(code, ns)  # noqa: S102 - the release's own loader, from its source file
    loader = ReleaseLoader(pkg, fmt, allows_zero=False, _ns=ns)
    loader.allows_zero = _accepts_zero(loader)
    return loader


def _accepts_zero(loader: ReleaseLoader) -> bool:
    """Ask the release itself whether 0 (no speculation) is a valid candidate."""
    import tempfile

    if loader.format == "flat":
        return False  # 0.5.12.post1 has no zero-step (no-spec) state at all
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"1": {"candidate_steps": [0, 1]}}, fh)
        probe = fh.name
    try:
        loader.load(probe)
        return True
    except (ValueError, AssertionError):
        return False
    finally:
        Path(probe).unlink(missing_ok=True)


# ------------------------------------------------------------------ choosing candidates


@dataclass
class TierChoice:
    batch_size: int
    tok_s: dict[int, float]           # steps -> per-stream tok/s used
    best_steps: int
    candidates: list[int]
    note: str | None = None


def choose(table: Table, within_pct: float = DEFAULT_WITHIN_PCT, *,
           allows_zero: bool = True) -> list[TierChoice]:
    """Per tier, the step counts within ``within_pct`` % of the best per-stream tok/s."""
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
        if not allows_zero and 0 in cands:
            cands = [s for s in cands if s > 0]
            if not cands:
                pos = {s: v for s, v in row.items() if s > 0}
                if not pos:
                    continue
                cands = [max(pos, key=lambda s: (pos[s], -s))]
            note = ("no speculation is within reach here, but this release cannot switch it off "
                    "per tier (its loader wants positive steps)")
        out.append(TierChoice(bs, row, best_s, cands, note))
    if not out:
        raise UserError("no tier has a positive tok/s measurement", exit_code=2)
    return out


def config_for(choices: list[TierChoice], fmt: str) -> dict[str, Any]:
    """The JSON object SGLang reads, in the release's format."""
    if fmt == "tiers":
        return {str(c.batch_size): {"candidate_steps": c.candidates} for c in choices}
    union = sorted({s for c in choices for s in c.candidates if s > 0})
    if len(union) < 2:
        raise UserError(f"SGLang 0.5.12's adaptive config is one candidate list for every batch "
                        f"size with at least two step counts; the measurements support only "
                        f"{union}: launch with a static --steps instead", exit_code=2)
    return {"candidate_steps": union}


def launch_steps(tiers: dict[int, list[int]]) -> int:
    """--speculative-num-steps to start with: the largest candidate.

    0.5.13+ refuse a start step outside the union of candidates
    (0.5.16 arg_groups/speculative_hook.py _init_adaptive_speculative_params; 0.5.13
    validate_adaptive_initial_steps), and 0.5.16 crashes at start when it is below the largest
    ("shared logits buffer holds 256 rows but caller needs 512", measured on the H200): the
    buffers are sized from the start step while a tier may switch up to the largest.
    """
    union = sorted({s for v in tiers.values() for s in v})
    if not union or max(union) < 1:
        raise UserError("the adaptive config has no positive candidate step: nothing to speculate "
                        "with (launch with --no-spec instead)", exit_code=2)
    return max(union)


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
        steps = 0 if c.get("baseline") else int(c["steps"])
        ladder = c.get("ladder")
        if ladder:
            for lv in ladder["levels"]:
                put(int(lv["concurrency"]), steps, lv["summary"]["per_stream_tok_s"], "measured")
        else:
            b = c["bench"]
            put(int(b["params"].get("concurrency", 1)), steps,
                b["summary"]["decode_tok_s"]["avg"], "measured")
    for r in (((doc.get("analysis") or {}).get("tiers") or {}).get("predicted", []) or []) if predicted else []:
        put(int(r["batch_size"]), int(r["steps"]), r.get("per_stream_tok_s"), "predicted")
    return table, source


def load_measurements(path: str | Path, predicted: bool = False
                      ) -> tuple[Table, dict[tuple[int, int], str], str]:
    """--from: a sweep folder or its results.json."""
    from .bench import read_json

    p = Path(path)
    f = p / "results.json" if p.is_dir() else p
    if not f.exists():
        raise UserError(f"--from {path}: no such file (a sweep folder or its results.json)", 2)
    doc = read_json(f)
    if not isinstance(doc, dict) or doc.get("schema") != "eagle3_sweep/1":
        raise UserError(f"--from {f}: not a sweep results file (eagle3_sweep/1)", exit_code=2)
    table, source = table_from_sweep(doc, predicted)
    if not table:
        raise UserError(f"--from {f}: no finished topk-1 or no-spec configuration", exit_code=2)
    return table, source, str(f)


def write(table: Table, out: str | Path, loader: ReleaseLoader,
          within_pct: float = DEFAULT_WITHIN_PCT,
          write_json: Callable[[str | Path, Any], None] | None = None
          ) -> tuple[list[TierChoice], dict[str, Any], dict[int, list[int]]]:
    """Choose, write, and read back with the release's own loader; returns what it read."""
    from .bench import write_json as _wj

    choices = choose(table, within_pct, allows_zero=loader.allows_zero)
    cfg = config_for(choices, loader.format)
    outp = Path(out)
    if outp.is_dir():
        raise UserError(f"--out {out}: a directory; give a file name such as {outp / 'adaptive.json'}", 2)
    (write_json or _wj)(outp, cfg)
    try:
        read = loader.load(outp)
    except (ValueError, AssertionError, KeyError, TypeError) as exc:
        raise UserError(f"{outp}: the release's own loader ({loader.source}) refuses it: {exc}") from exc
    return choices, cfg, read
