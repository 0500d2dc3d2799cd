"""One SGLang scheduler serving greedy chat requests, as the probes and the hold hooks see it.

What is real: the plugin's cycle hook (runtime/plugin/wrappers.py), the step-control hooks and the
hold decider (stepctl.py, hold.py), the profiler and its window records (probes/), the readers
(accounting, tune/scan_cells). What is faked, because it needs a GPU: the worker (phase times from
a fixed cost model on a scripted clock) and the controller's states (tests/test_stepctl.py
FakeController). Acceptance is exact, not drawn: the tiny construction's maps (tiny/construct.py,
f = the target's next token, g = the draft's; ``tiny --acceptance 0.8``, seed 0, the 8B and MoE
shapes' 1024-id cycle) give every greedy topk-1 verify, and every chat request walks the same
stretch of the cycle (its prompt ends with the template's last token), as on the H200 where every
request was one prompt at temperature 0. ``starts`` gives requests other stretches (many prompts).

Arrivals: closed loop (each of ``streams`` streams sends its next request when one ends, the first
ones ``stagger`` cycles apart), or ``arrivals``: a list of decode-cycle numbers at which one
request each arrives (open loop; the batch then changes every few cycles).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

from scripted import Clock
from test_stepctl import FakeController

from sglang_eagle3_ext.runtime import probes, stepctl
from sglang_eagle3_ext.runtime.plugin import procstate, wrappers
from sglang_eagle3_ext.runtime.probes import timers
from sglang_eagle3_ext.tiny import construct

CHAT_LAST = 198  # tiny.json chat_last_token: the chat template's last id, the same for every build
MAPS = construct.partial_maps(0.8, 0, 32000)
GRAPH_BS = [1, 2, 4, 8, 16, 32]
RULE = {"rule": "not_extend", "arg": "batch", "extend_in_batch": "true"}


def cycle_ms(steps: int, bs: int) -> dict[str, float]:
    """Phase ms of one decode cycle (the cost model; only acceptance matters here)."""
    return {"draft": 1.2 * steps, "verify": 4.0 + 0.1 * bs + 0.05 * (steps + 1) * bs, "extend": 0.5}


GAP_MS, PREFILL_MS = 0.3, 3.0


def rotation(monkeypatch: Any) -> None:
    """The schedule before issue 33: a fixed rotation forward then back, blocks of exactly N."""
    from sglang_eagle3_ext.runtime import hold

    monkeypatch.setattr(hold, "block_length", lambda level, block_id, n: n)
    monkeypatch.setattr(hold, "round_order", lambda level, rnd, c: tuple(c) if rnd % 2 == 0 else tuple(c)[::-1])


class Serve:
    """``run()`` serves ``requests`` requests of ``tokens`` tokens each and returns the probe
    records; ``client`` holds what SGLang's counters say (completion tokens, verifies)."""

    def __init__(self, tmp_path: Path, monkeypatch: Any, *, steps: tuple[int, ...] = (5, 4, 3, 2, 1, 0),
                 block: int | None = 32, every: int = 100, overlap: bool = True, tokens: int = 256,
                 streams: int = 1, stagger: int = 0, arrivals: list[int] | None = None,
                 starts: list[int] | None = None, name: str = "prof.jsonl") -> None:
        monkeypatch.setattr(procstate._S, "missing", [])  # the hooks are applied
        stepctl.install(None)
        if block:
            monkeypatch.setenv("SGLANG_EAGLE3_HOLD", str(block))
        else:
            monkeypatch.delenv("SGLANG_EAGLE3_HOLD", raising=False)
        monkeypatch.delenv("SGLANG_EAGLE3_HOLD_STEPS", raising=False)
        self.ctrl = FakeController(built=steps, start=max(steps))
        self.ctrl.params._cuda_graph_bs = list(GRAPH_BS)
        self.ctrl.worker.topk = 1
        if block:
            stepctl.init_hook("hold", list)(lambda self: None, self.ctrl)
        self.clock = Clock()
        self.out = tmp_path / name
        probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": str(every),
                              "EAGLE3_PROFILE_OUT": str(self.out)}, backend=timers.FakeEventTimer(self.clock))
        self.cycle = wrappers._cycle_hook(RULE)
        self.overlap, self.tokens, self.streams, self.stagger = overlap, tokens, streams, stagger
        self.arrivals = sorted(arrivals) if arrivals is not None else None
        self.starts = starts or [CHAT_LAST]
        self.client = {"tokens": 0, "verifies": 0, "requests": 0}
        self.sizes: list[int] = []  # the decode batch size of every cycle
        self.steps_ran: list[int] = []
        self.log: list[tuple[int, int, list[int], int]] = []  # per cycle: bs, steps, counts, prefills before it

    def _batch(self, bs: int, extend: bool) -> Any:
        mode = types.SimpleNamespace(is_extend=lambda: extend, is_idle=lambda: False)
        return types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False,
                                     seq_lens=types.SimpleNamespace(shape=(bs,)))

    def _forward(self, worker: Any, batch: Any) -> Any:
        bs = batch.seq_lens.shape[0]
        stepctl.activate_hook(lambda c, n: None, self.ctrl, bs)  # 0.5.13+: the decode branch asks first
        s = worker.speculative_num_steps
        for name, ms in cycle_ms(s, bs).items():
            if ms:
                probes.phase_begin(name)
                self.clock.ms(ms)
                probes.phase_end(name)
        return types.SimpleNamespace(speculative_num_draft_tokens=s + 1, can_run_cuda_graph=True)

    def _prefill(self) -> None:
        self.cycle(lambda w, b: self.clock.ms(PREFILL_MS), self.ctrl.worker, self._batch(1, True))

    def run(self, requests: int) -> list[dict[str, Any]]:
        f, g, _ = MAPS
        active: list[list[int]] = []  # [token the next verify starts from, tokens done]
        pending: list[int] | None = None
        sent = done = n = 0
        while done < requests:
            joins = 0
            if self.arrivals is None:
                want = min(self.streams, 1 + n // self.stagger) if self.stagger else self.streams
                joins = min(want - len(active), requests - sent)
            else:
                while self.arrivals and self.arrivals[0] <= n and sent < requests:
                    self.arrivals.pop(0)
                    joins += 1
            for _ in range(max(0, joins)):
                self._prefill()
                start = self.starts[sent % len(self.starts)]
                active.append([f[start], 1])  # the prefill emits the first token
                sent += 1
            if not active:  # open loop, nothing to decode: the server idles until the next arrival
                n += 1
                self.clock.ms(1.0)
                continue
            bs = len(active)
            self.cycle(self._forward, self.ctrl.worker, self._batch(bs, False))
            s = self.ctrl.worker.speculative_num_steps
            self.sizes.append(bs)
            self.steps_ran.append(s)
            counts = []
            for r in active:
                a, r[0] = construct.chain_verify(f, g, r[0], s)
                counts.append(a)
                r[1] += a + 1
                self.client["verifies"] += 1
            self.log.append((bs, s, counts, max(0, joins)))
            if self.overlap:  # V2: this batch's result is processed while the next one runs
                if pending is not None:
                    probes.record_accept(pending, bonus_included=False)
                pending = counts
            else:
                probes.record_accept(counts, bonus_included=False)
            left = sum(1 for r in active if r[1] >= self.tokens)
            self.client["tokens"] += self.tokens * left  # SGLang cuts the last verify at max_tokens
            self.client["requests"] += left
            done += left
            active = [r for r in active if r[1] < self.tokens]
            self.clock.ms(GAP_MS)
            n += 1
        if pending is not None:
            probes.cycle_begin()
            probes.record_accept(pending, bonus_included=False)
        probes.flush()
        return [json.loads(x) for x in self.out.read_text().splitlines()]


def static_truth(tmp_path: Path, monkeypatch: Any, steps: int, *, tokens: int = 256, requests: int = 4,
                 **kw: Any) -> dict[str, Any]:
    """What a separately started server of ``steps`` measures on the same traffic: its probes'
    cell at batch size 1 (steady cycles) and SGLang's counter (completion tokens / verifies)."""
    from sglang_eagle3_ext.tune import scan_cells

    srv = Serve(tmp_path, monkeypatch, steps=(steps,), block=None, tokens=tokens, name=f"static{steps}.jsonl", **kw)
    recs = srv.run(requests)
    cells = [scan_cells.cell(v, v["bs"]) for v in scan_cells.merge_keys(recs).values()]
    cell = max(cells, key=lambda c: c["cycles"])
    return {"accept_len": cell["accept_len"], "per_stream_tok_s": cell["per_stream_tok_s"],
            "sglang_accept_len": srv.client["tokens"] / srv.client["verifies"]}
