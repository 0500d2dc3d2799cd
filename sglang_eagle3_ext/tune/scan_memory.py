"""The memory of N adaptive states: estimated from the model configs before the start, measured from the server log's capture lines after it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..runtime.safeparse import CONFIG_LIMIT, json_loads, read_text

# ------------------------------------------------------------------ memory of N states (estimate)


def _cfg_json(path: str | None) -> dict[str, Any]:
    try:
        data = json_loads(read_text(Path(str(path)).expanduser() / "config.json", what="a model config",
                                    limit=CONFIG_LIMIT), strict=False)
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
    (docs/results.md, round 5). The measured line is the figure to trust.
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
_TREE_BUILT = re.compile(r"trees: built tree (\d+x\d+x\d+)")  # the plugin's line right after SGLang's Built line
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
    last_built: tuple[str, float] | None = None
    for line in text.splitlines():
        r = _RANK.match(line)
        if r and r.group(1) != "0":
            continue
        if start_steps is None and (m := _START.search(line)):
            start_steps = int(m.group(1))
        if (m := _TREE_BUILT.search(line)) and last_built is not None:
            # the Built line just before was this tree's (SGLang's builder logs its step count only)
            steps_key, gib = last_built
            per_state[steps_key] = round(per_state.get(steps_key, 0.0) - gib, 3)
            if not per_state[steps_key]:
                del per_state[steps_key]
            per_state[m.group(1)] = round(per_state.get(m.group(1), 0.0) + gib, 3)
            last_built = None
            continue
        if m := _BUILT.search(line):
            built += 1
            per_state[m.group(1)] = round(per_state.get(m.group(1), 0.0) + float(m.group(2)), 3)
            last_built = (m.group(1), float(m.group(2)))
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
