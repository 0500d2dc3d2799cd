"""Stand-in for `python -m sglang.launch_server` with adaptive states and the hold schedule (no GPU).

What is faked and why: there is no GPU here, so this process plays SGLang 0.5.16 started by
`sgl-eagle3 scan`: it reads the argv the scan builds (--speculative-adaptive-config with one tier,
--speculative-num-steps = the start step, which must be the largest candidate as 0.5.16 demands),
and the env it sets (SGLANG_EAGLE3_HOLD / _HOLD_STEPS, EAGLE3_PROFILE_OUT / _EVERY). One decode loop
runs batched "cycles" on a fixed cost model instead of a model:

    cycle ms (steps s, batch b) = 2.0 + 0.4 s + 0.05 b (s + 1)          (plain server: 1.8 + 0.04 b)
    conditional acceptance per draft position = 0.8, 0.6, 0.4, 0.3, 0.2 (seeded draws)

The hold schedule is the plugin's real decider (sglang_eagle3_ext/runtime/hold.py HoldDecider, fed each
cycle's batch size like the activate_step_by_batch hook; graph-size padding left out), and every
EAGLE3_PROFILE_EVERY cycles one eagle3_prof/3 record is built by the probes' own functions
(probes/window.py classify / switch_bits / split_record / by_key / build_record) from the cycles
as the profiler holds them (phase ms, join bits, accept counts, the configuration tag). Phase times are the
cost model's (as GPU timers would report), split draft 0.4 s / verify / extend 0.2 / other 0.3.
The streams are OpenAI-compatible (usage, sglext spec_verify_ct), like tests/standin_openai.py.
STANDIN_SCAN_SLOW=X multiplies every cycle; STANDIN_SCAN_CRASH=1 fails the start;
STANDIN_SCAN_NO_ACCEPT=0,.. : those step counts report no accept counts (their cycles never key);
STANDIN_SCAN_IGNORE_TERM=1 ignores SIGTERM; STANDIN_SCAN_START_DELAY=S sleeps S seconds before ready.

Trees beside the chains (SGLANG_EAGLE3_TREES=3x4x8@1-4,..., as `scan --trees` sets it): each tree is one
more state of the hold schedule (its label in SGLANG_EAGLE3_HOLD_STEPS; held only at the batch sizes of
its @range, as stepctl.ControllerInfo.eligible allows), and its cycles are tagged (steps, topk, draft
tokens) like the probes tag a tree cycle, so the scan keys them apart from the chain of the same steps.
A tree's made-up cost and acceptance (no GPU, no tree kernel here):

    cycle ms (tree S x K x N, batch b) = 2.0 + 0.4 S + 0.05 b N
    conditional acceptance per position = 1 - (1 - rate)^(K / 2)   (more candidates per depth)

so tree 3x4x8 beats the best chain at 1 stream and loses to it at 32, the shape the H200 measured.
The start log carries a 'Built adaptive runtime state' line per tree and the plugin's 'trees: built'.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from httpd import Httpd  # this folder: the script is run as a file

from sglang_eagle3_ext.runtime import specstate
from sglang_eagle3_ext.runtime.probes import window

RATES = (0.8, 0.6, 0.4, 0.3, 0.2, 0.15, 0.1)


def arg(name: str, default: str | None = None) -> str | None:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


def cycle_ms(steps: int | None, bs: int) -> float:
    if steps is None:
        return 1.8 + 0.04 * bs
    return 2.0 + 0.4 * steps + 0.05 * bs * (steps + 1)


def tree_ms(st: specstate.State, bs: int) -> float:
    return 2.0 + 0.4 * st.steps + 0.05 * bs * st.tokens


def rates_of(st: specstate.State) -> list[float]:
    if not st.is_tree:
        return list(RATES[: st.steps])
    return [1.0 - (1.0 - r) ** (st.topk / 2.0) for r in RATES[: st.steps]]


def expected_accept_len(steps: int) -> float:
    total, p = 1.0, 1.0
    for j in range(steps):
        p *= RATES[j]
        total += p
    return total


class Req:
    def __init__(self, n: int) -> None:
        self.remaining = n
        self.done_tokens = 0
        self.verify = 0
        self.cond = threading.Condition()
        self.new = True
        self.finished = False
        self.counter = 0


class Engine:
    def __init__(self) -> None:
        self.spec = "--speculative-algorithm" in sys.argv
        cfg = arg("--speculative-adaptive-config")
        cands: list[int] = []
        if cfg:
            tiers = json.load(open(cfg))
            cands = sorted({s for t in tiers.values() for s in t["candidate_steps"]})
        start = int(arg("--speculative-num-steps", "0") or 0)
        if cands and start != max(cands):
            print("AssertionError: shared logits buffer holds 256 rows but caller needs 512", flush=True)
            sys.exit(1)
        self.trees = specstate.parse_trees(os.environ.get("SGLANG_EAGLE3_TREES") or "")
        built: list[int | str] = [*cands, *(t.state.label for t in self.trees)]
        order = os.environ.get("SGLANG_EAGLE3_HOLD_STEPS")
        self.cands = ([int(x) if x.strip().isdigit() else x.strip() for x in order.split(",")] if order
                      else (built or [start]))
        self.hold = int(os.environ.get("SGLANG_EAGLE3_HOLD") or 0)
        self.decider = None
        if self.hold and self.spec:  # the plugin's real hold decider (sglang_eagle3_ext/runtime/hold.py)
            from sglang_eagle3_ext.runtime.hold import HoldDecider, candidates_for

            ranges = {t.state.label: t for t in self.trees}

            def eligible(level: int, key: int | str) -> bool:  # stepctl.ControllerInfo.eligible's rule
                t = ranges.get(key) if isinstance(key, str) else None
                return t is None or t.serves(level)

            self.decider = HoldDecider(self.hold, candidates_for(built, self.cands), eligible=eligible)
        self.out = os.environ.get("EAGLE3_PROFILE_OUT") if os.environ.get("EAGLE3_PROFILE") == "1" else None
        self.every = int(os.environ.get("EAGLE3_PROFILE_EVERY") or 100)
        self.slow = float(os.environ.get("STANDIN_SCAN_SLOW") or 1.0)
        self.no_accept = set((os.environ.get("STANDIN_SCAN_NO_ACCEPT") or "").split(",")) - {""}
        self.lock = threading.Condition()
        self.active: list[Req] = []
        self.bs_cycles: dict[int, int] = {}
        self.current = start if self.spec else None
        self.window = 0
        self.rng = random.Random(1234)
        self.w: list[dict[str, Any]] = []
        self.hist: dict[int, int] = {}
        self.last_bs: int | None = None
        self.prev_steps: tuple[Any, ...] | None = None

    def choose(self, bs: int) -> tuple[int | str | None, int]:
        """(steps, block id): the hold schedule, a pure function of the per-bs cycle count."""
        n = self.bs_cycles.get(bs, 0)
        self.bs_cycles[bs] = n + 1
        if not self.spec:
            return None, -1
        if self.decider is None:
            return self.current, -1
        steps = self.decider.choose(bs, self.current, self.cands)
        return steps, int(self.decider.block or 0)

    def accepted(self, key: int | str) -> int:
        """Seeded (repeatable) draws against each position's conditional rate."""
        a = 0
        for r in rates_of(specstate.of_key(key)):
            if self.rng.random() >= r:
                break
            a += 1
        return a

    def loop(self) -> None:
        while True:
            with self.lock:
                while not self.active:
                    self.lock.wait(0.5)
                batch = list(self.active)
            bs = len(batch)
            steps, block = self.choose(bs)
            joined = any(r.new for r in batch)
            self.current = steps
            ms = (cycle_ms(steps, bs) if steps is None or not isinstance(steps, str)
                  else tree_ms(specstate.of_key(steps), bs))
            time.sleep(ms * self.slow / 1000.0)
            toks, accs = [], []
            for r in batch:
                a = self.accepted(steps or 0)
                t = min(a + 1, r.remaining)
                toks.append(t)
                accs.append(a)
            accs = [t - 1 for t in toks]  # a request at its last token accepts only what it needs
            for r, t in zip(batch, toks, strict=True):
                with r.cond:
                    r.new = False
                    r.remaining -= t
                    r.done_tokens += t
                    r.verify += 1
                    if r.remaining <= 0:
                        r.finished = True
                    r.cond.notify_all()
            with self.lock:
                self.active = [r for r in self.active if not r.finished]
                self.lock.notify_all()
            if self.spec and self.out:
                self.account(steps or 0, bs, block, ms, joined, accs)

    def account(self, key: int | str, bs: int, block: int, ms: float, joined: bool, accs: list[int]) -> None:
        """One decode cycle, as the probes hold it (phases, why bits, counts, the configuration tag:
        a tree's cycle carries its topk and draft tokens)."""
        st = specstate.of_key(key)
        steps = st.steps
        draft, extend, other = 0.4 * steps, (0.2 if steps else 0.0), 0.3
        req = 0 if str(key) in self.no_accept else bs  # a state whose verify reports no counts
        self.w.append({"draft": draft, "verify": ms - draft - extend - other, "extend": extend, "other": other,
                       "cycle": ms, "why": window.JOIN if joined else 0, "nreq": req, "nacc": sum(accs) if req else 0,
                       "tag": (steps, st.topk, st.tokens, bs, True, block, req, sum(accs) if req else 0,
                               list(accs) if req else [], True)})
        for a in accs:
            self.hist[a] = self.hist.get(a, 0) + 1
        if len(self.w) >= self.every:
            self.flush()

    def flush(self) -> None:
        """The window record, built by the probes' own code (probes/window.py), as the profiler does."""
        self.window += 1
        cyc = self.w
        per = {p: [c[p] for c in cyc] for p in (*window.PHASES, window.CYCLE)}
        tags = [c["tag"] for c in cyc]
        sizes, bits, nreq, nacc, self.last_bs = window.classify_window(
            [c["why"] for c in cyc], [c["nreq"] for c in cyc], [c["nacc"] for c in cyc], tags,
            self.last_bs, self.prev_steps)
        self.prev_steps = tuple(tags[-1][:3])  # as the profiler: (steps, topk, draft tokens)
        split = window.split_record(per, sizes, bits, nreq, nacc, 0)
        split["by_key"] = window.by_key(per, bits, tags)
        split["key_cycles"] = window.key_cycles(bits, tags)
        split["control"] = {"decider": "hold" if self.decider else None, "block": self.hold or None,
                            "candidates": list(self.cands), "choices": window.choices(tags)}
        rec = window.build_record(window=self.window, per_cycle=per, hist=self.hist, mode="events",
                                  spec={"steps": None, "topk": 1, "draft_tokens": None}, route="plugin",
                                  sglang_version="0.5.16", rank=0, tp_size=1, split=split)
        with open(self.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        self.w, self.hist = [], {}

    def submit(self, n: int) -> Req:
        r = Req(n)
        r.done_tokens = 1  # the prefill's first token
        r.remaining = n - 1
        with self.lock:
            self.active.append(r)
            self.lock.notify_all()
        return r


ENGINE: Engine


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": "standin-scan", "object": "model"}]}))
        elif self.path in ("/health", "/health_generate"):
            self._send(200, "")
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, "{}")
            return
        n = int(body.get("max_tokens") or 16)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def emit(obj: dict[str, Any]) -> None:
            obj.setdefault("object", "chat.completion.chunk")
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

        def usage(done: int) -> dict[str, int]:
            return {"prompt_tokens": 11, "completion_tokens": done, "total_tokens": 11 + done}

        emit({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        r = ENGINE.submit(n)
        emit({"choices": [{"index": 0, "delta": {"content": " t"}}], "usage": usage(1)})
        sent = 1
        while True:
            with r.cond:
                while r.done_tokens == sent and not r.finished:
                    r.cond.wait(1.0)
                done, fin = r.done_tokens, r.finished
            if done > sent:
                emit({"choices": [{"index": 0, "delta": {"content": " t" * (done - sent)}}], "usage": usage(done)})
                sent = done
            if fin and sent >= done:
                break
        emit({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        if body.get("return_spec_tokens_details") and ENGINE.spec:
            emit({"choices": [], "sglext": {"spec_tokens_details": {
                "spec_verify_ct": r.verify + 1, "spec_accept_length": n / (r.verify + 1)}}})
        emit({"choices": [], "usage": usage(n)})
        self.wfile.write(b"data: [DONE]\n\n")


def state_gib(steps: int) -> float:
    """The stand-in's graph memory of one state (what its log lines say)."""
    return round(0.05 * (steps + 1), 2)


def graph_log(cands: list[int | str], start: int | None, trees: list[specstate.TreeSpec] | None = None) -> None:
    """SGLang 0.5.16's graph lines, in its order and text: the start state's captures
    (model_runner_components/cuda_graph_setup.py, eagle_worker_v2.py), then for every other
    candidate its draft captures and one 'Built adaptive runtime state' line
    (eagle_worker_v2.build_adaptive_runtime_state, which also holds the state's target graphs)."""
    ts = "[2026-12-01 20:25:44]"
    if start is None:
        return
    print(f"{ts} AdaptiveSpeculativeParams initialized: steps={start}, candidate_steps={cands}", flush=True)
    print(f"{ts} Capture target verify CUDA graph begin. backend=full, num_tokens_per_req={start + 1}, bs=[1, 2, 4], "
          f"avail mem=62.56 GB", flush=True)
    print(f"{ts} Capture target verify CUDA graph end. elapsed=3.13 s, mem usage={state_gib(start) - 0.02:.2f} GB, "
          f"avail mem=62.29 GB.", flush=True)
    print(f"{ts} Capture draft decode CUDA graph end. elapsed=1.00 s, mem usage=0.01 GB, avail mem=62.28 GB.", flush=True)
    print(f"{ts} Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.01 GB, avail mem=62.27 GB.", flush=True)
    for s in cands:
        if s == start or isinstance(s, str):
            continue
        if s > 0:
            print(f"{ts} Capture draft decode CUDA graph end. elapsed=0.50 s, mem usage=0.01 GB, avail mem=62.00 GB.",
                  flush=True)
        print(f"{ts} Capture draft extend CUDA graph end. elapsed=0.50 s, mem usage=0.01 GB, avail mem=61.99 GB.",
              flush=True)
        print(f"{ts} Built adaptive runtime state steps={s}: elapsed=1.20s, mem={state_gib(s):.2f}GB", flush=True)
    for t in trees or ():  # the plugin's build (treeswitch.build_trees): SGLang's builder, then its own line
        gib = round(0.02 * t.state.tokens, 2)
        print(f"{ts} Built adaptive runtime state steps={t.state.steps}: elapsed=1.70s, mem={gib:.2f}GB", flush=True)
        print(f"{ts} trees: built {t.state.describe()} with graphs for batch sizes "
              f"{[b for b in (1, 2, 4, 8, 16, 32) if t.serves(b)]}", flush=True)


def main() -> int:
    global ENGINE
    host, port = arg("--host", "127.0.0.1"), int(arg("--port", "30000") or 30000)
    print(f"[standin-scan] argv: {' '.join(sys.argv[1:])}", flush=True)
    if os.environ.get("STANDIN_SCAN_CRASH"):  # a failed start (an OOM while capturing the states' graphs)
        print("torch.OutOfMemoryError: CUDA out of memory while capturing the graphs of state 4", flush=True)
        return 1
    if os.environ.get("STANDIN_SCAN_IGNORE_TERM"):  # a server that ignores SIGTERM: only SIGKILL ends it
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ENGINE = Engine()
    graph_log(sorted(c for c in ENGINE.cands if not isinstance(c, str)), ENGINE.current, ENGINE.trees)
    time.sleep(float(os.environ.get("STANDIN_SCAN_START_DELAY") or 0))  # a long start (graph capture)
    threading.Thread(target=ENGINE.loop, daemon=True).start()
    httpd = Httpd((host, port), Handler)
    httpd.daemon_threads = True
    print("The server is fired up and ready to roll!", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
