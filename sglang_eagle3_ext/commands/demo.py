"""`sgl-eagle3 demo`: tiny models -> probes (patch or plugin) -> profiled launch -> bench ->
profile table -> stop -> revert, in one command, on whatever GPU and SGLang this machine has.

Without a CUDA GPU (or with --dry-run) it still builds the tiny models and plans the patch, then
prints the launch command, env and the steps it would run, and changes nothing in SGLang.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .console import err, out

HELP = "One-command demo: tiny models, probes, profiled EAGLE-3 server, bench, profile table, revert."

# Small-footprint server flags every release we know accepts; --server-args adds more
# (e.g. the H200 bundle's "--attention-backend triton --sampling-backend pytorch ...").
BASE_SERVER_ARGS = ["--mem-fraction-static", "0.3", "--max-running-requests", "8"]
SHAPE_MEM_FRACTION = {"llama3-8b": "0.6", "moe": "0.7"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--acceptance", default="oracle", metavar="oracle|random|P",
                   help="tiny draft quality (see `sgl-eagle3 tiny`; default oracle)")
    p.add_argument("--shape", default="tiny", metavar="NAME",
                   help="model shape passed to `sgl-eagle3 tiny --shape` (tiny, llama3-8b, moe)")
    p.add_argument("--steps", type=int, default=2, help="EAGLE3 steps (topk 1, steps+1 draft tokens)")
    p.add_argument("--route", choices=("auto", "patch", "plugin"), default="auto",
                   help="how probes get in: plugin (SGLang 0.5.11+) or source patch; auto prefers plugin")
    p.add_argument("--out", default="demo-out", metavar="DIR", help="models, logs, results (default demo-out)")
    p.add_argument("--models", metavar="DIR", default=None,
                   help="where to build the tiny models (default OUT/models)")
    p.add_argument("--runs", type=int, default=3, help="measured bench runs (after 1 warm-up)")
    p.add_argument("--max-tokens", type=int, default=200,
                   help="tokens generated per bench request (default 200)")
    p.add_argument("--port", type=int, default=30000,
                   help="port of the demo's SGLang server (default 30000; must be free)")
    p.add_argument("--profile-every", type=int, default=20, help="cycles per profile window")
    p.add_argument("--profile-mode", choices=("events", "wall", "sync"), default=None)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the server")
    p.add_argument("--server-args", default="", metavar="'ARGS'",
                   help="extra SGLang server flags, one quoted string")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the tiny models' weights (default 0; same seed, same models)")
    p.add_argument("--dry-run", action="store_true", help="show what would run, even on a GPU")


def server_args(shape: str) -> list[str]:
    """BASE_SERVER_ARGS, with room for the weights of a real-size shape (16 / 56 GB)."""
    mem = SHAPE_MEM_FRACTION.get(shape)
    return BASE_SERVER_ARGS if mem is None else ["--mem-fraction-static", mem] + BASE_SERVER_ARGS[2:]


def metrics_args(env) -> list[str]:
    """--enable-metrics where SGLang exports its speculative counters (0.5.13+): the bench then
    reads SGLang's own accept length, and the demo prints it beside ours."""
    return ["--enable-metrics"] if env.at_least("0.5.13") else []


def gpu_name() -> str | None:
    """Name of CUDA device 0, or None (no torch, no CUDA, or no device)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch means no GPU for us
        return None
    try:
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


def choose_route(route: str, env) -> str:
    if route == "auto":
        return "plugin" if env.has_plugins else "source-patch"
    if route == "plugin":
        if not env.has_plugins:
            raise UserError(f"SGLang {env.version} has no plugin framework (0.5.11+); "
                            "use --route patch", exit_code=2)
        return "plugin"
    return "source-patch"


def _validate(args: argparse.Namespace) -> None:
    from .. import tiny

    tiny.parse_acceptance(args.acceptance)
    tiny.check_device(tiny.get_shape(args.shape), 1)
    if args.steps < 1:
        raise UserError("--steps must be >= 1", exit_code=2)
    if args.runs < 1 or args.max_tokens < 1 or args.profile_every < 1:
        raise UserError("--runs, --max-tokens and --profile-every must be >= 1", exit_code=2)
    try:
        shlex.split(args.server_args)
    except ValueError as exc:
        raise UserError(f"--server-args: {exc}", exit_code=2) from None


def _step(n: int, text: str) -> None:
    err.print(f"[bold]\\[{n}/7][/] ", end="", highlight=False)
    err.print(text, highlight=False, markup=False)  # paths may hold [ ] that rich would eat


def run(args: argparse.Namespace) -> int:
    from .. import tiny
    from ..runtime.sglang_env import locate
    from ..serve import server as srv

    _validate(args)
    from ..serve.stepenv import command_notes, refuse_exported

    refuse_exported("demo")  # an exported SGLANG_EAGLE3_HOLD / _POLICY would drive the demo's server
    for note in command_notes("demo"):  # our NCCL / probe variables: not passed to its servers
        err.print(f"note: {note}", highlight=False, markup=False)
    env = locate(args.sglang_root)
    route = choose_route(args.route, env)
    gpu = gpu_name()
    outdir = Path(args.out).absolute()
    outdir.mkdir(parents=True, exist_ok=True)
    live = bool(gpu) and not args.dry_run
    err.print(f"SGLang {env.version} at {env.package_dir} ({env.source}); route: {route}; "
              f"GPU: {gpu or 'none'}" + ("" if live else " -> dry run: nothing is launched or changed"))

    model_dir = Path(args.models).absolute() if args.models else outdir / "models"
    _step(1, f"{'tiny' if args.shape == 'tiny' else args.shape} models (acceptance={args.acceptance}) -> {model_dir}")
    models = tiny.build(model_dir, args.acceptance, seed=args.seed, shape=args.shape)
    expected = models.info["expected_accept_len"].get(str(args.steps))
    average = None
    if "chat_last_token" in models.info:
        # partial: every bench (chat) request walks the same stretch of the cycle, whose accept
        # length is not the cycle average (docs/reference/tiny.md, "measured vs expected")
        from ..tiny import construct

        maps = json.loads((models.root / "maps.json").read_text())
        average = expected
        expected = round(construct.simulate_request(maps["f"], maps["g"], args.steps,
                                                    models.info["chat_last_token"], args.max_tokens)[0], 4)

    _step(2, "probes: " + ("plugin (EAGLE3_PROFILE=1 activates it in every SGLang process)"
                           if route == "plugin" else "source patch of the installed SGLang"))
    from ..patcher import engine

    pl = None
    if route == "source-patch":
        pl = engine.apply(env, dry_run=not live)
        files = [f.rel for f in pl.files if f.action == "patch"]
        out.print(f"{'patched' if live else 'would patch'}: {', '.join(files) or '(already patched)'}")

    cfg = srv.LaunchConfig(
        model=str(models.target), draft=str(models.draft), algorithm="EAGLE3", steps=args.steps,
        topk=1, draft_tokens=args.steps + 1, profile=True, profile_every=args.profile_every,
        profile_mode=args.profile_mode, profile_out=str(outdir / "profile.jsonl"),
        port=args.port, log=str(outdir / "server.log"), timeout=args.timeout,
        extra_args=server_args(args.shape) + metrics_args(env) + shlex.split(args.server_args), name="demo")
    if route == "source-patch":
        cfg.env["SGLANG_PLUGINS"] = "none"  # one recorder only: the patched code
    argv, add_env = srv.build_command(cfg)
    _step(3, "launch (profiled):")
    out.print(" ".join(f"{k}={shlex.quote(v)}" for k, v in add_env.items()) + " \\\n  "
              + " ".join(shlex.quote(a) for a in argv), highlight=False, markup=False)
    bench_cmd = (f"sgl-eagle3 bench --url {cfg.url} --runs {args.runs} --warmup 1 "
                 f"--max-tokens {args.max_tokens}")
    _step(4, f"bench: {bench_cmd}")
    _step(5, f"profile: sgl-eagle3 profile {shlex.quote(str(outdir / 'profile.jsonl'))}")
    _step(6, "stop the server")
    _step(7, "revert the patch (byte-identical install)" if route == "source-patch"
          else "nothing to revert (plugin route)")
    summary: dict[str, Any] = {"sglang_version": env.version, "route": route, "gpu": gpu,
                               "acceptance": models.info["acceptance"], "steps": args.steps,
                               "expected_accept_len": expected, "command": argv, "env": add_env,
                               "live": live}
    if average is not None:
        summary["expected_accept_len_average"] = average
    if not live:
        why = "--dry-run" if args.dry_run else "no CUDA GPU on this machine"
        out.print(f"[yellow]{why}:[/] steps 3-7 not run; the tiny models are in {model_dir}")
        (outdir / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
        return 0
    return _run_live(args, env, route, cfg, outdir, summary)


def _run_live(args, env, route: str, cfg, outdir: Path,
              summary: dict[str, Any]) -> int:
    from ..serve.interrupts import as_interrupt

    with as_interrupt():  # SIGTERM/SIGHUP: the finally blocks stop the server and revert the patch
        return _live_steps(args, env, route, cfg, outdir, summary)


def _live_steps(args, env, route: str, cfg, outdir: Path, summary: dict[str, Any]) -> int:
    from ..documents import jsonio, prof_records
    from ..measure import accounting, bench
    from ..patcher import engine
    from ..serve import server as srv
    from .bench import render
    from .profile_tables import _table

    rc = 1
    try:
        t0 = time.time()
        server = srv.Server(cfg)
        try:
            server.start(wait=True, timeout=args.timeout)
            summary["healthy_after_s"] = round(time.time() - t0, 1)
            result = bench.run_bench(bench.BenchOptions(url=cfg.url, runs=args.runs, warmup=1,
                                                        max_tokens=args.max_tokens, label="demo"))
            jsonio.write_json(outdir / "bench.json", result)
            render(result)
        finally:
            server.stop()
        prof = outdir / "profile.jsonl"
        if prof.is_file():
            s = accounting.summarize(prof_records.load(prof))
            out.print(_table([s], None))
            summary["profile_accept_len"] = s["accept_len"]
            summary["cycle_ms"] = s["phases"]["cycle"]["mean_ms"]
        else:
            out.print(f"[red]no profile records in {prof}[/]: the probes did not run")
        summary["sglang_accept_len"] = result["summary"]["accept_length"]
        summary["decode_tok_s"] = result["summary"]["decode_tok_s"]
        out.print(f"accept length (incl. bonus): ours {summary.get('profile_accept_len')}, "
                  f"SGLang's {summary['sglang_accept_len']}, tiny model predicts "
                  f"{summary['expected_accept_len']}")
        rc = 0 if prof.is_file() else 1
    finally:
        if route == "source-patch":
            rep = engine.revert(env)
            out.print(f"reverted: {', '.join(rep.restored) or 'nothing to restore'}")
        (outdir / "demo.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return rc
