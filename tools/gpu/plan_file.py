"""A GPU campaign plan (tools/gpu/plans/*.yaml): loading, checking, and the CLI commands it makes.

A plan is data: which models `sgl-eagle3 tiny` builds, which traffic files `sgl-eagle3 traffic`
writes, which servers `sgl-eagle3 launch --detach` starts (static steps, `--policy`, `--adaptive`,
SGLang's EMA), side by side or one at a time, and what `sgl-eagle3 bench` / `scan` runs on them.
This module turns that data into argv lists and checks it; tools/gpu/run_plan.py runs them.
Nothing here starts a process. The keys are listed in tools/gpu/README.md.

Strings may use ``{repo}`` (this checkout), ``{work}`` (scratch: models, pid files),
``{models}`` (``{work}/models``: one folder per build) and ``{results}`` (what is packed into
``OUT/<plan>.tar.gz``).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "sglang_eagle3_ext"]
PLACEHOLDERS = ("repo", "work", "models", "results")
SGLANG = "0.5.16"  # the release the carried bundle holds (tools/gpu_bundle.py); a plan's `sglang:` overrides

TOP_KEYS = {"name", "about", "made", "machine", "deadline", "hard_stop", "server_args", "server_env", "profile",
            "sglang_check", "phases", "todo", "run", "sglang"}
PHASE_KINDS = {"build", "traffic", "copy", "scan", "serve", "cli"}
SERVER_KEYS = {"name", "build", "draft", "steps", "topk", "draft_tokens", "no_spec", "policy", "adaptive",
               "ema", "aux_layers", "trees", "hold", "env", "args", "max_running", "max_total_tokens", "profile",
               "todo"}
SERVE_KEYS = {"servers", "one_at_a_time", "use", "keep", "start_budget", "stagger", "port",
              "workload", "todo"}
WORK_KINDS = {"bench", "twin", "metrics", "counter_check", "identity", "cli", "scan"}
TWIN_CLIENTS = ("ours-chat", "ours-generate", "bench_serving-chat", "bench_serving-generate")


class PlanError(ValueError):
    """A plan that cannot run: one line that names the plan and the place."""


@dataclass
class Plan:
    path: Path
    doc: dict[str, Any]
    name: str = ""
    deadline: float = 540.0
    hard_stop: float = 570.0
    phases: list[dict[str, Any]] = field(default_factory=list)


def load(path: str | Path) -> Plan:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise PlanError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{p}: a plan is a mapping (name, phases, ...)")
    bad = set(doc) - TOP_KEYS
    if bad:
        raise PlanError(f"{p}: unknown key(s) {sorted(bad)} (known: {sorted(TOP_KEYS)})")
    for key in ("name", "about", "made", "run", "phases"):
        if key not in doc:
            raise PlanError(f"{p}: missing '{key}'")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", str(doc["name"])):
        raise PlanError(f"{p}: name {doc['name']!r}: letters, digits, '.', '_' and '-' only (it names files)")
    plan = Plan(path=p, doc=doc, name=str(doc["name"]), deadline=float(doc.get("deadline", 540)),
                hard_stop=float(doc.get("hard_stop", 570)), phases=list(doc["phases"] or []))
    for i, ph in enumerate(plan.phases):
        _check_phase(plan, i, ph)
    return plan


def _check_phase(plan: Plan, i: int, ph: Any) -> None:
    where = f"{plan.path}: phase {i + 1}"
    if not isinstance(ph, dict):
        raise PlanError(f"{where}: a phase is a mapping with one of {sorted(PHASE_KINDS)}")
    kinds = set(ph) & PHASE_KINDS
    if len(kinds) != 1:
        raise PlanError(f"{where}: needs exactly one of {sorted(PHASE_KINDS)} (has {sorted(ph)})")
    kind = kinds.pop()
    if kind == "serve":
        if set(ph) != {"serve"} or not isinstance(ph["serve"], dict):
            raise PlanError(f"{where}: serve is a mapping (servers, workload, ...) and the phase's only key")
        ph = ph["serve"]
        bad = set(ph) - SERVE_KEYS
        if bad:
            raise PlanError(f"{where}: unknown key(s) {sorted(bad)} for serve (known: {sorted(SERVE_KEYS)})")
        if not ph.get("servers") and not ph.get("use"):
            raise PlanError(f"{where}: serve needs servers (or use: servers an earlier phase keeps)")
        for s in ph.get("servers") or []:
            if not isinstance(s, dict) or "name" not in s:
                raise PlanError(f"{where}: every server is a mapping with a name")
            bad = set(s) - SERVER_KEYS
            if bad:
                raise PlanError(f"{where}: server {s['name']}: unknown key(s) {sorted(bad)} "
                                f"(known: {sorted(SERVER_KEYS)})")
            if not isinstance(s["name"], str) or not re.fullmatch(r"[A-Za-z0-9._-]+", s["name"]):
                raise PlanError(f"{where}: server name {s['name']!r}: a string of letters, digits, '.', '_' "
                                "and '-' (quote YAML words such as off / on / yes)")
            if "build" not in s:
                raise PlanError(f"{where}: server {s['name']}: needs 'build' (the models it serves)")
        for w in ph.get("workload") or []:
            if not isinstance(w, dict) or len(set(w) & WORK_KINDS) != 1:
                raise PlanError(f"{where}: every workload item has exactly one of {sorted(WORK_KINDS)}")
    elif kind == "build" and not isinstance(ph["build"], dict):
        raise PlanError(f"{where}: build is a mapping: build name -> tiny options")
    elif kind == "scan" and not isinstance(ph["scan"], dict):
        raise PlanError(f"{where}: scan is a mapping (name, build, args, server_args)")


def phase_kind(ph: dict[str, Any]) -> str:
    return next(k for k in ph if k in PHASE_KINDS)


def work_kind(w: dict[str, Any]) -> str:
    return next(k for k in w if k in WORK_KINDS)


# ------------------------------------------------------------------------------------------------
# Values: placeholders and CLI options


def fill(value: Any, ctx: dict[str, str]) -> Any:
    """Placeholders filled in every string (lists and mappings walked); an unknown one is an error."""
    if isinstance(value, str):
        try:
            return value.format_map(ctx) if "{" in value else value
        except (KeyError, ValueError) as exc:
            raise PlanError(f"{value!r}: unknown placeholder {exc} (known: {', '.join(PLACEHOLDERS)})") from None
    if isinstance(value, list):
        return [fill(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ctx) for k, v in value.items()}
    return value


def options(mapping: dict[str, Any] | None) -> list[str]:
    """{max_tokens: 256, ignore_eos: true, concurrency: [1, 8]} -> --max-tokens 256 --ignore-eos
    --concurrency 1,8 (false / null leave the option out): plan files speak the CLI's own words."""
    argv: list[str] = []
    for key, v in (mapping or {}).items():
        flag = "--" + str(key).replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is False or v is None:
            continue
        elif isinstance(v, list):
            argv += [flag, ",".join(_num(x) for x in v)]
        else:
            argv += [flag, _num(v)]
    return argv


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def words(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# ------------------------------------------------------------------------------------------------
# Commands


def model_dir(ctx: dict[str, str], build: str) -> Path:
    return Path(ctx["models"]) / build


def tiny_cmd(ctx: dict[str, str], build: str, opts: dict[str, Any], extra: list[str] = ()) -> list[str]:
    return [*CLI, "tiny", "--out", str(model_dir(ctx, build)), *options(fill(opts, ctx)), *extra]


def traffic_cmd(ctx: dict[str, str], name: str, opts: dict[str, Any]) -> list[str]:
    o = dict(fill(opts, ctx))
    build = o.pop("build")
    return [*CLI, "traffic", "--build", str(model_dir(ctx, build)), "--out", traffic_path(ctx, name),
            *options(o)]


def traffic_path(ctx: dict[str, str], name: str) -> str:
    return str(Path(ctx["results"]) / f"{name}.json")


def server_args(plan: Plan, s: dict[str, Any]) -> list[str]:
    """SGLang's flags for one server: the plan's, the batch caps, the EMA switch, the server's own."""
    args = [str(a) for a in plan.doc.get("server_args") or []]
    if s.get("max_running"):
        bs = str(s["max_running"])
        args += ["--max-running-requests", bs, "--cuda-graph-max-bs-decode", bs]
    if s.get("max_total_tokens"):
        args += ["--max-total-tokens", str(s["max_total_tokens"])]
    if s.get("ema"):
        args.append("--speculative-adaptive")  # SGLang's own EMA rule, on its default tiers
    return merge_args(args, [str(a) for a in s.get("args") or []])


def merge_args(base: list[str], extra: list[str]) -> list[str]:
    """``extra``'s ``--flag value`` replaces the value of the same flag in ``base`` (one place, one
    value: a server's own --mem-fraction-static over the plan's); new flags are appended."""
    out = list(base)
    i = 0
    while i < len(extra):
        flag = extra[i]
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        if flag in out and has_value and out.index(flag) + 1 < len(out):
            out[out.index(flag) + 1] = extra[i + 1]
        else:
            out += extra[i:i + 1 + has_value]
        i += 1 + has_value
    return out


def launch_cmd(plan: Plan, ctx: dict[str, str], s: dict[str, Any], port: int) -> list[str]:
    s = fill(s, ctx)
    name, models = s["name"], model_dir(ctx, s["build"])
    res = Path(ctx["results"]) / name
    argv = [*CLI, "launch", "--model", str(models / "target")]
    if s.get("no_spec"):
        argv.append("--no-spec")
    else:
        argv += ["--draft", str(models / s.get("draft", "draft"))]
        for key in ("steps", "topk", "draft_tokens"):
            if s.get(key) is not None:
                argv += ["--" + key.replace("_", "-"), str(s[key])]
        if s.get("steps") is not None and s.get("topk") is None and not (s.get("policy") or s.get("adaptive")):
            argv += ["--topk", "1", "--draft-tokens", str(int(s["steps"]) + 1)]
        for key in ("policy", "adaptive", "aux_layers", "trees", "hold"):
            if s.get(key):
                argv += ["--" + key.replace("_", "-"), str(s[key])]
        prof = s.get("profile", plan.doc.get("profile"))
        if prof:
            prof = prof if isinstance(prof, dict) else {}
            argv += ["--profile", "--profile-out", str(res / "prof.jsonl"), *options(prof)]
    argv += ["--port", str(port), "--log", str(res / "server.log"), "--timeout", "900", "--detach",
             "--pid-file", pid_file(ctx, name)]
    if not plan.doc.get("sglang_check", False):
        argv.append("--no-sglang-check")
    return [*argv, "--", *server_args(plan, s)]


def pid_file(ctx: dict[str, str], name: str) -> str:
    return str(Path(ctx["work"]) / "pids" / f"{name}.pid")


def stop_cmd(ctx: dict[str, str], name: str) -> list[str]:
    return [*CLI, "stop", "--pid-file", pid_file(ctx, name), "--grace", "5"]


def scan_cmd(plan: Plan, ctx: dict[str, str], sc: dict[str, Any], port: int) -> list[str]:
    sc = fill(sc, ctx)
    models = model_dir(ctx, sc["build"])
    args = merge_args([str(a) for a in plan.doc.get("server_args") or []], [str(a) for a in sc.get("server_args") or []])
    argv = [*CLI, "scan", "--model", str(models / "target"), "--draft", str(models / sc.get("draft", "draft")),
            "--out", str(Path(ctx["results"]) / sc["name"]), "--port", str(port), *options(sc.get("args"))]
    if not plan.doc.get("sglang_check", False):
        argv.append("--no-sglang-check")
    return [*argv, "--", *args]


def bench_cmd(ctx: dict[str, str], url: str, label: str, opts: dict[str, Any], out: Path) -> list[str]:
    return [*CLI, "bench", "--url", url, "--label", label, *options(fill(opts, ctx)), "--out", str(out)]


def bench_rounds(w: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A bench item's rounds: (file tag, bench options). ``vary: {request_rate: [8, 2]}`` gives one
    round per value; ``repeat: N`` the same options N times; both: every value N times in turn."""
    b = w["bench"]
    base = dict(b.get("args") or {})
    vary = b.get("vary") or {}
    if len(vary) > 1:
        raise PlanError(f"bench {b.get('name')}: vary one option at a time (has {sorted(vary)})")
    repeat = int(b.get("repeat", 1))
    if not vary:
        return [(f"k{i}" if repeat > 1 else "", base) for i in range(repeat)]
    key, values = next(iter(vary.items()))
    short = {"request_rate": "r", "concurrency": "c"}.get(key, key.replace("_", "-"))
    out, k = [], int(b.get("first", 0))  # first: the first file number (a server measured again later)
    for _ in range(repeat):
        for v in values:
            out.append((f"{short}{_num(v)}-k{k}", {**base, key: v}))
            k += 1
    return out


def twin_cmds(ctx: dict[str, str], t: dict[str, Any], url: str, port: int, out: Path
              ) -> list[tuple[str, list[str]]]:
    """Ours and SGLang's bench_serving on one server: same traffic file, rate, request count, seed;
    each after a cache flush. (who, argv) in the plan's order."""
    t = fill(t, ctx)
    rate, n, seed = _num(t["request_rate"]), str(t.get("num_requests", 100)), str(t.get("seed", 42))
    tr = t["prompts"]
    flush = ["--flush-cache"] if t.get("flush_cache", True) else []
    ours = [*CLI, "bench", "--url", url, "--prompts", tr, "--request-rate", rate, "--num-requests", n,
            "--seed", seed, "--ignore-eos", *flush]
    theirs = [sys.executable, "-m", "sglang.bench_serving", "--host", "127.0.0.1", "--port", str(port),
              "--dataset-name", "sharegpt", "--dataset-path", tr, "--num-prompts", n, "--request-rate", rate,
              "--seed", seed, "--tokenizer", str(model_dir(ctx, t["build"]) / "target"), *flush]
    cmds = []
    for who in t.get("clients") or TWIN_CLIENTS:
        if who not in TWIN_CLIENTS:
            raise PlanError(f"twin: unknown client {who!r} (known: {', '.join(TWIN_CLIENTS)})")
        api = who.split("-", 1)[1]
        stem = out / f"{who}-r{rate}"
        if who.startswith("ours"):
            cmds.append((who, [*ours, "--api", api, "--label", f"{who} rate {rate}", "--out", f"{stem}.json"]))
        else:
            backend = "sglang" if api == "generate" else "sglang-oai-chat"
            cmds.append((who, [*theirs, "--backend", backend, "--output-file", f"{stem}.jsonl"]))
    return cmds
