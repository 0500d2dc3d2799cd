"""A plan's ``serve`` phase: start servers (side by side, or one at a time), run the workload on
them, stop them. Used by tools/gpu/run_plan.py; the keys are in tools/gpu/README.md.

Side by side: the first server of a run starts alone (it warms SGLang's JIT kernel cache), each
later one as soon as the previous has sized its KV pool (SGLang budgets the pool from the free
memory it measured before loading, so a neighbour allocating meanwhile would shrink it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plan_file as P

if TYPE_CHECKING:
    from run_plan import Runner

KV_READY = ("KV Cache is allocated", "Memory pool end")
TOGGLE = "EAGLE3_PROFILE_TOGGLE"


class Serve:
    def __init__(self, runner: Runner, ph: dict[str, Any]) -> None:
        self.r, self.ph = runner, ph
        self.servers: list[dict[str, Any]] = list(ph.get("servers") or [])
        self.names = [*(ph.get("use") or []), *(s["name"] for s in self.servers)]
        for s in self.servers:  # a name is a results folder: one server per name in a plan
            if s["name"] in runner.specs and runner.rehearse:
                runner.errors.append(f"server name {s['name']} used twice (its results folder would be shared)")
            runner.specs[s["name"]] = s
        if "port" in ph:
            runner.port = max(runner.port, int(ph["port"]))

    def run(self) -> None:
        r, ph = self.r, self.ph
        use = list(ph.get("use") or [])
        for name in use:
            if r.rehearse and name not in r.live:
                r.errors.append(f"serve: uses {name}, which no earlier phase keeps running")
        budget = float(ph.get("start_budget", 0))
        if ph.get("one_at_a_time"):
            for s in self.servers:
                if r.past(budget):
                    r.log(f"deadline: {s['name']} not started")
                    r.record(f"start {s['name']}", "skipped")
                    continue
                mine = self.start([s])
                self.workload([*use, *mine])
                self.stop_unkept(mine)
        elif self.servers and r.past(budget):
            r.log(f"deadline: {', '.join(s['name'] for s in self.servers)} not started")
            for s in self.servers:
                r.record(f"start {s['name']}", "skipped")
        else:
            mine = self.start(self.servers)
            self.workload([*use, *mine])
            self.stop_unkept(mine)
        self.stop_unkept(use)  # servers an earlier phase kept: stopped unless kept again

    def stop_unkept(self, names: list[str]) -> None:
        keep = set(self.ph.get("keep") or [])
        for name in names:
            if name not in keep and name in self.r.live:
                self.r.stop(name)

    # -- starts ---------------------------------------------------------------------------------

    def start(self, servers: list[dict[str, Any]]) -> list[str]:
        r = self.r
        procs: list[tuple[str, subprocess.Popen | None, float]] = []
        for s in servers:
            name, port = s["name"], r.port
            r.port += 1
            argv = P.launch_cmd(r.plan, r.ctx, s, port)
            env = {k: str(v) for k, v in {**(r.plan.doc.get("server_env") or {}), **(s.get("env") or {})}.items()}
            r.live[name] = {"url": f"http://127.0.0.1:{port}", "port": port, "spec": s}
            if r.rehearse:
                r.call(f"start {name}", argv, env=env)
                self.rehearse_checks(s)
                continue
            (r.results / name).mkdir(parents=True, exist_ok=True)
            Path(P.pid_file(r.ctx, name)).unlink(missing_ok=True)
            argv = r._standin(argv)
            fh = open(r.results / name / "launch.txt", "w")  # noqa: SIM115 - closed in wait_all
            fh.write(f"$ {P.words(argv)}\n")
            fh.flush()
            r.commands += 1
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=r._env(argv, env))
            procs.append((name, proc, time.monotonic()))
            proc.fh = fh  # type: ignore[attr-defined]
            r.log(f"starting {name} on port {port}")
            self.wait_kv(name, proc, alone=not r.started_any)
            r.started_any = True
        if r.rehearse:
            return [s["name"] for s in servers]
        return self.wait_all(procs)

    def wait_kv(self, name: str, proc: subprocess.Popen, alone: bool) -> None:
        """The first server of the run: until healthy. Others: until SGLang sized the KV pool."""
        log = self.r.results / name / "server.log"
        until = time.monotonic() + (900 if alone else float(self.ph.get("stagger", 120)))
        while time.monotonic() < until and proc.poll() is None:
            if not alone and log.exists() and any(m in log.read_text(errors="replace") for m in KV_READY):
                return
            time.sleep(0.5)

    def wait_all(self, procs: list[tuple[str, subprocess.Popen, float]]) -> list[str]:
        up = []
        for name, proc, t in procs:
            try:
                rc = proc.wait(timeout=960)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                rc = proc.wait()
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)  # launch stops the server it was starting
                proc.wait()
                raise
            finally:
                proc.fh.close()  # type: ignore[attr-defined]
            self.r.record(f"start {name}", "ok" if rc == 0 else "failed", rc, time.monotonic() - t)
            if rc == 0:
                self.r.log(f"{name} healthy after {time.monotonic() - t:.0f} s")
                up.append(name)
            else:
                self.r.live.pop(name, None)
                tail = (self.r.results / name / "launch.txt").read_text(errors="replace").strip().splitlines()[-1:]
                self.r.log(f"{name} failed to start (exit {rc}): {' '.join(tail)[:240]}")
        return up

    def rehearse_checks(self, s: dict[str, Any]) -> None:
        r = self.r
        for key in ("policy", "adaptive"):
            if s.get(key) and not r.exists(P.fill(s[key], r.ctx)):
                r.errors.append(f"server {s['name']}: {key} file {P.fill(s[key], r.ctx)} is made by no earlier step")
        if s.get("policy") and s.get("adaptive"):
            r.errors.append(f"server {s['name']}: policy and adaptive exclude each other")
        if s.get("todo"):
            print(f"  TODO ({s['name']}): {s['todo']}")

    # -- workload -------------------------------------------------------------------------------

    def workload(self, names: list[str]) -> None:
        for w in self.ph.get("workload") or []:
            kind = P.work_kind(w)
            getattr(self, f"w_{kind}")(w, names)
            if not self.r.rehearse:
                self.r.checkpoint(kind)

    def targets(self, item: dict[str, Any], names: list[str]) -> list[str]:
        chosen = item.get("servers")
        if chosen is None:
            return names
        if self.r.rehearse:
            for n in chosen:
                if n not in self.names:
                    self.r.errors.append(f"workload names server {n}, not running in this phase")
        return [n for n in chosen if n in names]

    def w_bench(self, w: dict[str, Any], names: list[str]) -> None:
        r, b = self.r, w["bench"]
        targets = self.targets(b, names)
        rounds = P.bench_rounds(w)
        for i, (tag, opts) in enumerate(rounds):
            order = targets[::-1] if b.get("alternate") and i % 2 else targets
            for name in order:
                if not r.alive(name):
                    r.log(f"{name} is not running: {b['name']} {tag} skipped")
                    r.record(f"bench {name} {b['name']} {tag}", "skipped")
                    continue
                stem = r.results / name / (f"{b['name']}-{tag}" if tag else b["name"])
                argv = P.bench_cmd(r.ctx, r.live[name]["url"], name, opts, stem.with_suffix(".json"))
                r.call(f"bench {name} {b['name']} {tag}".rstrip(), argv, stem.with_suffix(".txt"),
                       timeout=float(b.get("timeout", 300)))
            if not r.rehearse and i + 1 < len(rounds):
                r.checkpoint(f"{b['name']} {tag}")  # every finished round is in the pack

    def w_twin(self, w: dict[str, Any], names: list[str]) -> None:
        r, t = self.r, w["twin"]
        name = t["server"]
        if r.rehearse and name not in names:
            r.errors.append(f"twin: server {name} is not running in this phase")
        if not r.alive(name):
            return
        repeat = int(t.get("repeat", 1))
        for k in range(repeat):
            d = r.results / (f"twin{k}" if repeat > 1 else "twin")
            d.mkdir(parents=True, exist_ok=True) if not r.rehearse else None
            for who, argv in P.twin_cmds(r.ctx, t, r.live[name]["url"], r.live[name]["port"], d):
                if r.standin and who.startswith("bench_serving"):
                    r.log(f"twin {who}: not run with CPU stand-ins")
                    continue
                rate = P._num(t["request_rate"])
                r.call(f"twin {who} {k}", argv, d / f"{who}-r{rate}.txt",
                       timeout=int(t.get("num_requests", 100)) / float(t["request_rate"]) + 120)

    def w_scan(self, w: dict[str, Any], names: list[str]) -> None:
        """A scan while this phase's servers sit idle (its cells beside separately started servers)."""
        self.r.phase_scan(w)

    def w_metrics(self, w: dict[str, Any], names: list[str]) -> None:
        """SGLang's /metrics of every server (the switch counters, accept length, ...)."""
        r, tag = self.r, str(w["metrics"])
        for name in names:
            if r.rehearse:
                print(f"# /metrics of {name} -> {r.results / name / f'metrics-{tag}.txt'}")
                continue
            if r.alive(name):
                scrape(r.live[name]["url"], r.results / name / f"metrics-{tag}.txt", r.log)

    def w_cli(self, w: dict[str, Any], names: list[str]) -> None:
        c = w["cli"]
        self.r.call(f"cli {c['name']}", [*P.CLI, *[str(a) for a in P.fill(c["argv"], self.r.ctx)]],
                    self.r.results / f"{c['name']}.txt", timeout=float(c.get("timeout", 300)))

    def w_counter_check(self, w: dict[str, Any], names: list[str]) -> None:
        """The probes against SGLang's counters over the same requests (fidelity): flush the probes
        (two SIGUSR2s to each scheduler: the resume writes the partial window) and read /metrics,
        one bench, flush and read again; the records written in between hold exactly its verifies."""
        r, c = self.r, w["counter_check"]
        for name in self.targets(c, names):
            spec = r.live.get(name, {}).get("spec") or {}
            if r.rehearse:
                env = {**(r.plan.doc.get("server_env") or {}), **(spec.get("env") or {})}
                if TOGGLE not in env or not (spec.get("profile", r.plan.doc.get("profile"))):
                    r.errors.append(f"counter_check {name}: the server needs probes on and env {TOGGLE}: SIGUSR2")
                print(f"# counter check on {name}: flush probes, /metrics, bench, flush, /metrics")
            opts = {"concurrency": c.get("concurrency", 4), "runs": 1, "warmup": 0,
                    "max_tokens": c.get("max_tokens", 2048), "ignore_eos": True, **(c.get("args") or {})}
            stem = r.results / name / "counter-check"
            argv = P.bench_cmd(r.ctx, r.live.get(name, {}).get("url", ""), name, opts, stem.with_suffix(".bench.json"))
            if r.rehearse:
                r.call(f"counter check {name}", argv)
                continue
            if r.alive(name):
                try:
                    counter_check(r, name, argv, stem)
                except Exception as exc:  # noqa: BLE001 - a failed check never costs the rest of the plan
                    r.log(f"counter check {name}: {type(exc).__name__}: {exc}")

    def w_identity(self, w: dict[str, Any], names: list[str]) -> None:
        """Greedy outputs of every server against a reference server's, prompt by prompt."""
        r, c = self.r, w["identity"]
        ref = c["reference"]
        others = [n for n in self.targets(c, names) if n != ref]
        prompts = P.fill(c["prompts"], r.ctx)
        if r.rehearse:
            if ref not in names:
                r.errors.append(f"identity: reference {ref} is not running in this phase")
            if not r.exists(prompts):
                r.errors.append(f"identity: prompts {prompts} is made by no earlier step")
            print(f"# identity: greedy /generate of {prompts} on {ref} and {', '.join(others)}, compared")
            return
        if not r.alive(ref):
            return
        doc = identity(r, ref, others, prompts, int(c.get("max_tokens", 256)))
        (r.results / f"identity-{c.get('name', 'greedy')}.json").write_text(json.dumps(doc, indent=1))


def scrape(url: str, path: Path, log: Any) -> None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(resp.read())
    except Exception as exc:  # noqa: BLE001 - a missing scrape is logged, the plan goes on
        log(f"/metrics of {url}: {exc}")


def _flush(pids: list[int]) -> None:
    for _ in range(2):
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        time.sleep(0.5)


def counter_check(r: Runner, name: str, argv: list[str], stem: Path) -> None:
    from sglang_eagle3_ext.measure import chat_client
    from sglang_eagle3_ext.serve import server
    from sglang_eagle3_ext.tune.tiers import read_records

    url = r.live[name]["url"]
    pids = server.scheduler_pids(int(server.read_pid_file(Path(P.pid_file(r.ctx, name)))["pgid"]))
    if not pids:
        r.log(f"counter check {name}: no sglang::scheduler process; skipped")
        return
    rec = r.results / name / "prof.jsonl"

    def counters() -> dict[str, float]:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            return chat_client.parse_counters(resp.read().decode())

    _flush(pids)
    n0, c0 = len(read_records(rec)), counters()
    r.call(f"counter check {name}", argv, stem.with_suffix(".txt"), timeout=300)
    time.sleep(0.5)
    _flush(pids)
    recs, c1 = read_records(rec)[n0:], counters()
    gen = c1.get(chat_client._COUNTER_GEN, 0) - c0.get(chat_client._COUNTER_GEN, 0)
    ver = c1.get(chat_client._COUNTER_VERIFY, 0) - c0.get(chat_client._COUNTER_VERIFY, 0)
    tok = sum(x.get("tokens", 0) or 0 for x in recs)
    pver = sum(x.get("requests", 0) or 0 for x in recs)  # request-verifies (probes/window.py)
    doc = {"server": name, "sglang": {"generation_tokens": gen, "verify_calls": ver,
                                      "accept_len": gen / ver if ver else None},
           "probes": {"windows": len(recs), "tokens": tok, "verifies": pver,
                      "accept_len": tok / pver if pver else None}}
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    a, b = doc["probes"]["accept_len"], doc["sglang"]["accept_len"]
    r.log(f"counter check {name}: probes {a} over {pver} verifies, SGLang {b} over {ver:.0f}"
          + (f" ({100 * (a / b - 1):+.2f} %)" if a and b else ""))


def identity(r: Runner, ref: str, others: list[str], prompts: str, max_tokens: int) -> dict[str, Any]:
    from sglang_eagle3_ext.measure.prompts import load_prompts, text_of

    texts = [text_of(p) or json.dumps(p) for p in load_prompts(prompts)]

    def greedy(name: str, text: str) -> str:
        body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}})
        req = urllib.request.Request(r.live[name]["url"] + "/generate", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.loads(resp.read()).get("text", "")

    want = [greedy(ref, t) for t in texts]
    doc: dict[str, Any] = {"reference": ref, "prompts": len(texts), "max_tokens": max_tokens, "servers": {}}
    for name in others:
        if not r.alive(name):
            continue
        got = [greedy(name, t) for t in texts]
        diff = [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b]
        doc["servers"][name] = {"identical": len(texts) - len(diff), "differ": diff}
        r.log(f"identity {name} vs {ref}: {len(texts) - len(diff)}/{len(texts)} greedy outputs identical")
        r.record(f"identity {name}", "ok" if not diff else "failed", len(diff))
    return doc
