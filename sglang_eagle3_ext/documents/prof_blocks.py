"""The EAGLE3_PROF text blocks of a server log, read back into window records (legacy blocks converted)."""

from __future__ import annotations

import re
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import (
    CYCLE,
    LABEL_TO_PHASE,
    PHASES,
    REASONS,
    SCHEMA,
)

_NUM = r"(\d+(?:\.\d+)?)"
_HEADER = re.compile(
    r"EAGLE3_PROF \((?P<cycles>\d+) cycles, (?P<tok>\d+) tok (?P<what>accepted|incl\. bonus)"
    r"(?:, (?P<req>\d+) verifies)?\)"
    r"(?: window (?P<window>\d+))?(?:, mode (?P<mode>\w+))?(?:, rank (?P<rank>\d+))?"
)
_PHASE_LINE = re.compile(
    r"(?P<label>" + "|".join(map(re.escape, LABEL_TO_PHASE)) + r"):\s*(?P<rest>.*)$"
)
_PHASE_VALUE = re.compile(_NUM + r" ms/cyc\s*\(\s*" + _NUM + r"%\)")
_TOTAL_LINE = re.compile(r"TOTAL:\s*(?P<rest>.*)$")
_TOTAL_VALUE = re.compile(_NUM + r" ms/cyc")
_ACCEPT_LINE = re.compile(r"Accept len:\s*(?P<rest>.*)$")
_ACCEPT_VALUE = re.compile(r"(?:" + _NUM + r"|n/a)(?P<bonus>\s*\(incl\. bonus\))?")
_TPS_LINE = re.compile(r"Eff tok/s:\s*(?P<rest>.*)$")
_POS_LINE = re.compile(r"Accept by pos:\s*(?P<rest>.*?)\s*\(conditional\)")
_MODE_LINE = re.compile(r"Timing mode:\s*(?P<mode>\w+)")
_CYCLES_LINE = re.compile(r"Cycles:\s*(?P<all>\d+) = (?P<steady>\d+) steady \+ (?P<bound>\d+) boundary \((?P<why>[^)]*)\)")
_STEADY_LINE = re.compile(
    r"Steady:\s*(?:none|" + _NUM + r" ms/cyc \(p50 " + _NUM + r"; draft " + _NUM + r", verify " + _NUM
    + r", extend " + _NUM + r", other " + _NUM + r"\), accept len (?:" + _NUM + r"|n/a), eff tok/s (?:"
    + _NUM + r"|n/a))"
)
_RAN_LINE = re.compile(r"Steps ran:\s*(?P<ran>.*?)(?: \((?P<who>\w+) decider, block (?P<block>\S+)\))?\s*$")
_BOUND_LINE = re.compile(r"Boundary cost:\s*\+" + _NUM + r" ms over steady p50, (?P<joins>\d+) joins")
_CONFIG_LINE = re.compile(
    r"Config:\s*steps (?P<steps>\S+), topk (?P<topk>\S+), draft tokens (?P<dt>[^;]+); "
    r"SGLang (?P<ver>[^;]+); route (?P<route>\S+)"
)


def _full_number(rest: str, pattern: re.Pattern[str]) -> re.Match[str] | None:
    m = pattern.match(rest.strip())
    return m


def _opt_int(s: str) -> int | None:
    s = s.strip()
    return int(s) if s.isdigit() else None


class _Block:
    def __init__(self, line: int) -> None:
        self.line = line
        self.header: re.Match[str] | None = None
        self.phases: dict[str, float] = {}
        self.pct: dict[str, float] = {}
        self.total: float | None = None
        self.accept: float | None = None
        self.accept_bonus: bool | None = None
        self.tps: float | None = None
        self.per_position: list[float | None] = []
        self.mode: str | None = None
        self.config: re.Match[str] | None = None
        self.split_cycles: re.Match[str] | None = None
        self.split_steady: re.Match[str] | None = None
        self.split_bound: re.Match[str] | None = None
        self.ran: re.Match[str] | None = None
        self.truncated: list[str] = []

    @property
    def has_body(self) -> bool:
        return bool(self.phases) or self.total is not None


def _scan_blocks(text: str) -> list[_Block]:
    """Find EAGLE3_PROF blocks; a block is a header and/or a run of known body lines."""
    blocks: list[_Block] = []
    cur: _Block | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        h = _HEADER.search(line)
        if h:
            cur = _Block(lineno)
            cur.header = h
            blocks.append(cur)
            continue
        m = _PHASE_LINE.search(line)
        if m:
            phase = LABEL_TO_PHASE[m["label"]]
            if cur is None or phase in cur.phases or phase in cur.truncated:
                cur = _Block(lineno)  # a body without a header line (e.g. cut by `grep | tail`)
                blocks.append(cur)
            v = _full_number(m["rest"], _PHASE_VALUE)
            if v:
                cur.phases[phase] = float(v[1])
                cur.pct[phase] = float(v[2])
            else:
                cur.truncated.append(phase)
            continue
        if cur is None:
            continue
        if m := _TOTAL_LINE.search(line):
            v = _full_number(m["rest"], _TOTAL_VALUE)
            if v:
                cur.total = float(v[1])
            else:
                cur.truncated.append("total")
        elif m := _ACCEPT_LINE.search(line):
            v = _full_number(m["rest"], _ACCEPT_VALUE)
            if v and v.group(0):
                cur.accept = float(v[1]) if v[1] else None
                cur.accept_bonus = bool(v["bonus"])
            else:
                cur.truncated.append("accept_len")
        elif m := _TPS_LINE.search(line):
            v = re.match(_NUM, m["rest"].strip())
            if v:
                cur.tps = float(v[1])
            elif not m["rest"].strip().startswith("n/a"):
                cur.truncated.append("eff_tok_s")
        elif m := _POS_LINE.search(line):
            cur.per_position = [None if x == "n/a" else float(x) for x in m["rest"].split()]
        elif m := _MODE_LINE.search(line):
            cur.mode = m["mode"]
        elif m := _CONFIG_LINE.search(line):
            cur.config = m
        elif m := _CYCLES_LINE.search(line):
            cur.split_cycles = m
        elif m := _STEADY_LINE.search(line):
            cur.split_steady = m
        elif m := _BOUND_LINE.search(line):
            cur.split_bound = m
        elif m := _RAN_LINE.search(line):
            cur.ran = m
        else:
            cur = None  # any other line ends the block
    return blocks


def _block_record(b: _Block, index: int, path: str, notes: list[str]) -> dict[str, Any]:
    where = f"{path}:{b.line}"
    h = b.header
    legacy = h is not None and h["what"] == "accepted" or (h is None and b.accept_bonus is False)
    if h is None and b.accept_bonus is None:
        legacy = True  # no header and no accept line: the only writer of such blocks is the seeds' patch
    missing = [p for p in PHASES if p not in b.phases]
    if b.total is None and missing:
        raise UserError(f"{where}: EAGLE3_PROF block lacks {', '.join(missing)} and TOTAL; cannot read it", exit_code=2)
    phases = {p: {"mean_ms": b.phases.get(p), "p50_ms": None, "p90_ms": None} for p in PHASES}
    total = b.total
    if total is None:
        total = round(sum(b.phases.values()), 4)
        notes.append(f"{where}: TOTAL line is cut off; cycle time taken as the sum of the phases ({total:.2f} ms)")
    phases[CYCLE] = {"mean_ms": total, "p50_ms": None, "p90_ms": None}
    cut = [t for t in b.truncated if t != "total"]
    if cut:
        notes.append(f"{where}: cut-off line(s) ignored: {', '.join(cut)}")

    cycles = int(h["cycles"]) if h else None
    rec: dict[str, Any] = {
        "schema": SCHEMA, "window": index, "cycles": cycles, "phases": phases,
        "source": "log", "line": b.line,
    }
    if legacy:
        rec["mode"] = "wall"  # the seeds' patch used perf_counter
        rec["legacy"] = {"accept_len_drafts_only": b.accept, "eff_tok_s_drafts_only": b.tps}
        if h is not None:
            acc = int(h["tok"])
            rec.update(requests=cycles, accepted_drafts=acc, tokens=acc + cycles)
            accept_len = acc / cycles + 1.0 if cycles else None
            how = f"({acc}/{cycles} + 1)"
        elif b.accept is not None:
            rec.update(requests=None, accepted_drafts=None, tokens=None)
            accept_len = b.accept + 1.0
            how = f"({b.accept:.2f} + 1)"
        else:
            rec.update(requests=None, accepted_drafts=None, tokens=None)
            accept_len = None
            how = ""
        rec["accept_len"] = round(accept_len, 4) if accept_len is not None else None
        rec["eff_tok_s"] = round(accept_len * 1000.0 / total, 2) if (accept_len and total) else None
        if accept_len is not None:
            old_al = f"Accept len {b.accept:.2f}" if b.accept is not None else f"{h['tok']} tok accepted"
            old_tps = f", Eff tok/s {b.tps:.1f} -> {rec['eff_tok_s']:.1f}" if b.tps is not None else (
                f", Eff tok/s -> {rec['eff_tok_s']:.1f}")
            notes.append(
                f"{where}: legacy block counted accepted drafts only; converted {old_al} -> "
                f"{accept_len:.3f} tokens per cycle incl. bonus {how}{old_tps} "
                f"(assumes one request per cycle, as the hand-made patch's single-stream runs had)"
            )
        rec["spec"] = {"steps": None, "topk": None, "draft_tokens": None}
        rec["per_position"] = []
        return rec

    # our own block
    req = int(h["req"]) if h and h["req"] else None
    tokens = int(h["tok"]) if h else None
    rec.update(
        requests=req,
        tokens=tokens,
        accepted_drafts=(tokens - req) if (tokens is not None and req is not None) else None,
        accept_len=b.accept,
        eff_tok_s=b.tps,
        per_position=b.per_position,
        mode=(b.mode or (h["mode"] if h else None)),
        rank=int(h["rank"]) if h and h["rank"] else None,
    )
    if h and h["window"]:
        rec["window"] = int(h["window"])
    if b.config:
        c = b.config
        rec["spec"] = {"steps": _opt_int(c["steps"]), "topk": _opt_int(c["topk"]),
                       "draft_tokens": _opt_int(c["dt"])}
        rec["sglang_version"] = None if c["ver"].strip() == "?" else c["ver"].strip()
        rec["route"] = None if c["route"] == "?" else c["route"]
    else:
        rec["spec"] = {"steps": None, "topk": None, "draft_tokens": None}
    if b.split_cycles and b.split_steady:
        _block_split(b, rec)
    if b.ran:
        rec["control"] = _block_control(b.ran)
    return rec


def _block_control(m: re.Match[str]) -> dict[str, Any]:
    """The /3 block's "Steps ran: bs 2: 1 x50, 3 x50 (hold decider, block 7)" line."""
    choices: dict[str, dict[str, int]] = {}
    for part in m["ran"].split(";"):
        bs, _, rest = part.strip().removeprefix("bs ").partition(":")
        row = choices.setdefault(bs.strip(), {})
        for item in rest.split(","):
            steps, _, n = item.strip().partition(" x")
            if n.isdigit():
                row[steps.strip()] = int(n)
    block = m["block"]
    return {"decider": m["who"], "block": int(block) if block and block.isdigit() else None,
            "candidates": None, "choices": choices}


def _block_split(b: _Block, rec: dict[str, Any]) -> None:
    """The steady / boundary lines of a /2 block: means and the steady cycle p50 only."""
    c, st = b.split_cycles, b.split_steady
    reasons = dict.fromkeys(REASONS, 0)
    for part in c["why"].split(","):
        k, _, v = part.strip().rpartition(" ")
        if k in reasons and v.isdigit():
            reasons[k] = int(v)
    phases = None
    if st[1] is not None:
        vals = dict(zip(PHASES, (float(x) for x in st.groups()[2:6]), strict=True))
        phases = {p: {"mean_ms": vals[p], "p50_ms": None, "p90_ms": None} for p in PHASES}
        phases[CYCLE] = {"mean_ms": float(st[1]), "p50_ms": float(st[2]), "p90_ms": None}
    rec["steady"] = {"cycles": int(c["steady"]), "requests": None, "accepted_drafts": None, "tokens": None,
                     "accept_len": float(st[7]) if st[7] else None, "phases": phases,
                     "eff_tok_s": float(st[8]) if st[8] else None}
    bd = b.split_bound
    rec["boundary"] = {"cycles": int(c["bound"]), "reasons": reasons, "phases": None,
                       "extra_ms": float(bd[1]) if bd else None, "extra_by_phase": None,
                       "joins": int(bd["joins"]) if bd else 0, "extra_ms_per_join": None}
