#!/usr/bin/env python3
"""Run one GPU campaign plan (tools/gpu/plans/*.yaml) through the package's own CLI.

    python tools/gpu/run_plan.py tools/gpu/plans/quickstart.yaml --rehearse      # CPU: print, check
    bash tools/gpu/run.sh python3 tools/gpu/run_plan.py tools/gpu/plans/quickstart.yaml --out $OUT

Every step is a subprocess of ``sgl-eagle3`` (tiny, traffic, launch --detach, bench, scan, stop)
or of SGLang's bench_serving. Results go under ``--work``/results/<plan> and are packed into
``OUT/<plan>.tar.gz`` after every step (a call cut at its limit still returns the last pack);
``OUT/<plan>.log`` is the progress log. ``--deadline``: no new step starts after this many
seconds; ``--hard-stop``: everything is stopped (a scan gets Ctrl-C and keeps what it measured),
the servers too, and what exists is packed. ``--rehearse`` starts nothing: it prints every command,
parses each of ours with the real CLI parser and checks the files each step needs exist or are
made by an earlier step. ``--standin`` runs the plan for real on a CPU: reduced model shapes and
the stand-in servers of tests/ (the plumbing, not the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plan_file as P  # noqa: E402

sys.path.insert(0, str(P.REPO))
SMALL = ["--layers", "4", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
         "--intermediate", "256", "--vocab", "4096", "--draft-vocab", "1024", "--device", "cpu"]
OUTPUTS = {"--out", "--log", "--pid-file", "--profile-out", "--output-file", "--models"}  # what a step writes


class Abort(Exception):
    """A step the rest of the plan needs failed (a build): stop here, keep what exists."""


class Runner:
    def __init__(self, plan: P.Plan, out: Path, work: Path, *, rehearse: bool = False, standin: bool = False,
                 deadline: float | None = None, hard_stop: float | None = None) -> None:
        self.plan, self.out, self.rehearse, self.standin = plan, out, rehearse, standin
        self.deadline = plan.deadline if deadline is None else deadline
        self.hard_stop = plan.hard_stop if hard_stop is None else hard_stop
        self.results = work / "results" / plan.name
        self.ctx = {"repo": str(P.REPO), "work": str(work), "models": str(work / "models"),
                    "results": str(self.results)}
        self.t0 = time.monotonic()
        self.live: dict[str, dict[str, Any]] = {}  # name -> {"url", "port", "spec"}
        self.specs: dict[str, dict[str, Any]] = {}
        self.port = 31000
        self.started_any = False
        self.produced: list[str] = []  # rehearsal: paths an earlier step makes
        self.errors: list[str] = []
        self.on_disk = False  # the check before a real run: what a warm machine already has counts
        self.steps: list[dict[str, Any]] = []
        self.commands = 0

    # -- bookkeeping --------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def log(self, msg: str) -> None:
        line = f"[plan {self.plan.name} {self.elapsed():6.1f}s] {msg}"
        print(line, flush=True)
        if not self.rehearse:
            with open(self.out / f"{self.plan.name}.log", "a") as fh:
                fh.write(line + "\n")

    def past(self, margin: float = 0) -> bool:
        """No new step: the deadline (less ``margin``, what the step needs) or the hard stop is near."""
        return not self.rehearse and self.elapsed() > min(self.deadline, self.hard_stop - 10) - margin

    def record(self, label: str, state: str, rc: int | None = None, secs: float = 0) -> None:
        self.steps.append({"step": label, "state": state, "rc": rc, "s": round(secs, 1),
                           "at_s": round(self.elapsed(), 1)})

    # -- one command ----------------------------------------------------------------------------

    def call(self, label: str, argv: list[str], log: Path | None = None, timeout: float = 600,
             env: dict[str, str] | None = None) -> int:
        self.commands += 1
        if self.rehearse:
            return self._rehearse(label, argv, env)
        if self.past():
            self.log(f"deadline: {label} not run")
            self.record(label, "skipped")
            return -1
        argv = self._standin(argv)
        t = time.monotonic()
        rc = self._wait(label, argv, log, timeout, env)
        tail = ""
        if log is not None and log.exists():
            lines = [ln for ln in log.read_text(errors="replace").splitlines()[1:-1] if ln.strip()]
            tail = " | ".join(lines[-2:])[:240]
        self.log(f"{label} -> exit {rc} ({time.monotonic() - t:.1f} s){': ' + tail if tail else ''}")
        self.record(label, "ok" if rc == 0 else "failed", rc, time.monotonic() - t)
        return rc

    def _wait(self, label: str, argv: list[str], log: Path | None, timeout: float,
              env: dict[str, str] | None) -> int:
        """One subprocess, its output in ``log``; on the hard stop it gets Ctrl-C (a scan then stops
        its server and keeps what it measured) and the stop goes on up."""
        t = time.monotonic()
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"$ {P.words(argv)}\n")
        with open(log, "a") if log is not None else open(os.devnull, "w") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=self._env(argv, env))
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                rc = _reap(proc)
                self.log(f"{label}: timed out after {timeout:.0f} s")
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)
                _reap(proc)
                fh.write(f"\n[stopped by the hard stop after {time.monotonic() - t:.1f} s]\n")
                self.record(label, "interrupted", None, time.monotonic() - t)
                raise
            fh.write(f"\n[exit {rc}, {time.monotonic() - t:.1f} s]\n")
        return rc

    def _env(self, argv: list[str], extra: dict[str, str] | None) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
        paths = [str(P.REPO)]
        if "sglang.bench_serving" in argv:
            import importlib.util

            if importlib.util.find_spec("datasets") is None:  # bench_serving imports it; unused here
                paths.insert(0, str(P.REPO / "tools" / "gpu" / "standins"))
        if self.standin:
            paths += [str(P.REPO / "tests"), str(P.REPO / "tests" / "standins")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
        return env

    def _standin(self, argv: list[str]) -> list[str]:
        """CPU run: reduced shapes on the CPU, stand-in servers (tests/) instead of SGLang."""
        if not self.standin or argv[:3] != P.CLI:
            return argv
        cmd = argv[3]
        if cmd == "tiny":
            return [*argv, *SMALL]
        if cmd in ("launch", "scan"):
            module = "standin_openai" if cmd == "launch" else "standin_scan"
            i = argv.index("--")
            return [*argv[:i], "--server-module", module, "--python", sys.executable, *argv[i:]]
        return argv

    def _rehearse(self, label: str, argv: list[str], env: dict[str, str] | None) -> int:
        print(f"# {label}" + (f"  (env {' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""))
        print(f"  $ {P.words(argv)}")
        if argv[:3] == P.CLI:
            msg = io.StringIO()
            try:
                with contextlib.redirect_stderr(msg), contextlib.redirect_stdout(io.StringIO()):
                    _parser().parse_args(argv[3:])
            except SystemExit as exc:
                if exc.code:
                    why = [ln for ln in msg.getvalue().splitlines() if ln.strip()][-1:] or ["?"]
                    self.errors.append(f"{label}: our CLI refuses it: {why[0]}")
        if argv[:3] == P.CLI and argv[3] in ("launch", "scan") and "--" in argv:
            missing = [a for a in argv[argv.index("--") + 1:] if a.startswith("--") and a not in self.sglang_flags()]
            if missing and self.sglang_flags():
                self.errors.append(f"{label}: SGLang {self.sglang_version()} has no {', '.join(missing)}")
        roots = (self.ctx["work"], self.ctx["repo"])
        for i, a in enumerate(argv):
            if not a.startswith(roots) or i < 3:
                continue
            if argv[i - 1] in OUTPUTS:
                self.produced.append(a)
            elif not self.exists(a):
                self.errors.append(f"{label}: needs {a}, which no earlier step makes")
        return 0

    def sglang_version(self) -> str:
        return str(self.plan.doc.get("sglang", P.SGLANG))

    def sglang_flags(self) -> frozenset[str]:
        """The server flags of the SGLang release the plan runs on (its unpacked sources in our
        cache, where the tests put them); empty when they are not here (then nothing is checked)."""
        if not hasattr(self, "_flags"):
            from sglang_eagle3_ext.runtime.sglang_env import locate
            from sglang_eagle3_ext.serve import releases
            from sglang_eagle3_ext.serve.release_flags import known_flags

            root = releases.cache_dir() / self.sglang_version()
            try:
                self._flags = known_flags(locate(root)) if (root / "sglang").is_dir() else frozenset()
            except Exception:  # noqa: BLE001 - an unreadable tree: the check is skipped, said below
                self._flags = frozenset()
            if not self._flags:
                print(f"# note: SGLang {self.sglang_version()}'s sources are not under {root}: "
                      "server flags not checked")
        return self._flags

    def exists(self, path: str) -> bool:
        if path.startswith(self.ctx["work"]):
            made = any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.produced)
            return made or (self.on_disk and Path(path).exists())
        return Path(path).exists()

    # -- phases ---------------------------------------------------------------------------------

    def run(self) -> int:
        if not self.rehearse:  # a fresh run starts from an empty results folder (the models stay)
            shutil.rmtree(self.results, ignore_errors=True)
            self.results.mkdir(parents=True)
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / f"{self.plan.name}.log").unlink(missing_ok=True)
        self.log(f"{self.plan.path.name}: deadline {self.deadline:.0f} s, hard stop {self.hard_stop:.0f} s"
                 + (", rehearsal (nothing starts)" if self.rehearse else "")
                 + (", CPU stand-ins" if self.standin else ""))
        if self.rehearse and self.plan.doc.get("todo"):
            print(f"TODO: {' '.join(str(self.plan.doc['todo']).split())}")
        if not self.rehearse:
            signal.signal(signal.SIGALRM, _hard_stop)
            signal.signal(signal.SIGTERM, _hard_stop)
            signal.alarm(max(1, int(self.hard_stop)))
            if shutil.which("nvidia-smi"):
                self.call("nvidia-smi", ["nvidia-smi", "--query-gpu=name,memory.used,memory.total",
                                         "--format=csv"], self.results / "nvidia-smi.txt", timeout=30)
        try:
            for i, ph in enumerate(self.plan.phases):
                kind = P.phase_kind(ph)
                getattr(self, f"phase_{kind}")(ph)
                if not self.rehearse:
                    self.checkpoint(f"phase {i + 1} ({kind})")
        except KeyboardInterrupt as exc:
            self.log(f"interrupted: {exc or 'hard stop'}")
        except Abort as exc:
            self.log(f"stopped: {exc}")
        except P.PlanError as exc:
            self.errors.append(str(exc))
        finally:
            if not self.rehearse:
                signal.alarm(0)
                # a second stop signal (the alarm, the call's teardown) must not cut the stops short
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                self.checkpoint("final")  # before the stops: a call cut while servers stop keeps it
                for name in list(self.live):
                    self.stop(name)
                self.checkpoint("after stops")
        if self.rehearse:
            return self.summary()
        failed = [s for s in self.steps if s["state"] == "failed"]
        self.log(f"done: {len(self.steps)} steps, {len(failed)} failed; {self.out / (self.plan.name + '.tar.gz')}")
        return 1 if failed else 0

    def summary(self) -> int:
        for e in self.errors:
            print(f"error: {e}")
        print(f"rehearsal of {self.plan.name}: {self.commands} commands, "
              f"{'no problem found' if not self.errors else f'{len(self.errors)} problem(s)'}")
        return 1 if self.errors else 0

    def phase_build(self, ph: dict[str, Any]) -> None:
        keep = set(ph["build"])
        models = Path(self.ctx["models"])
        if ph.get("clean") and not self.rehearse and models.exists():
            for d in models.iterdir():  # the disk holds one real shape's weights at a time
                if d.name not in keep:
                    shutil.rmtree(d, ignore_errors=True)
        for name, opts in ph["build"].items():
            folder = models / name
            if not self.rehearse and (folder / "tiny.json").exists():
                self.log(f"build {name}: already built on this machine")
            elif self.call(f"build {name}", P.tiny_cmd(self.ctx, name, opts),
                           self.results / f"build-{name}.txt", timeout=900) != 0:
                raise Abort(f"building {name} failed (build-{name}.txt)")
            if not self.rehearse:
                shutil.copy(folder / "tiny.json", self.results / f"tiny-{name}.json")

    def phase_traffic(self, ph: dict[str, Any]) -> None:
        for name, opts in ph["traffic"].items():
            if not self.rehearse and Path(P.traffic_path(self.ctx, name)).exists():
                continue
            self.call(f"traffic {name}", P.traffic_cmd(self.ctx, name, opts), self.results / f"{name}.txt",
                      timeout=300)

    def phase_copy(self, ph: dict[str, Any]) -> None:
        for dest, src in ph["copy"].items():
            lines = src.get("lines") if isinstance(src, dict) else None  # the file's first N lines
            match = src.get("match") if isinstance(src, dict) else None  # JSONL rows with these fields
            src, target = P.fill(src["from"] if isinstance(src, dict) else src, self.ctx), str(self.results / dest)
            if self.rehearse:
                print(f"# copy {src} -> {target}")
                if not self.exists(src):
                    self.errors.append(f"copy {dest}: {src} does not exist")
                self.produced.append(target)
                continue
            if lines or match:
                rows = [x for x in Path(src).read_text().splitlines(keepends=True) if x.strip()]
                if match:
                    rows = [x for x in rows if all(json.loads(x).get(k) == v for k, v in match.items())]
                Path(target).write_text("".join(rows[:int(lines)] if lines else rows))
            else:
                shutil.copy(src, target)

    def phase_cli(self, ph: dict[str, Any]) -> None:
        c = ph["cli"]
        self.call(f"cli {c['name']}", [*P.CLI, *[str(a) for a in P.fill(c["argv"], self.ctx)]],
                  self.results / f"{c['name']}.txt", timeout=float(c.get("timeout", 600)))
        for o in P.fill(c.get("makes") or [], self.ctx):
            self.produced.append(o)

    def phase_scan(self, ph: dict[str, Any]) -> None:
        sc = ph["scan"]
        if self.rehearse and sc.get("todo"):
            print(f"  TODO (scan {sc['name']}): {sc['todo']}")
        if self.past(float(sc.get("start_budget", 0))):
            self.log(f"deadline: scan {sc['name']} not started")
            return
        port, self.port = self.port + 100, self.port + 1
        self.call(f"scan {sc['name']}", P.scan_cmd(self.plan, self.ctx, sc, port),
                  self.results / f"{sc['name']}.txt", timeout=float(sc.get("timeout", 600)))
        self.started_any = True

    def phase_serve(self, ph: dict[str, Any]) -> None:
        from serve_steps import Serve

        Serve(self, ph["serve"]).run()

    # -- servers --------------------------------------------------------------------------------

    def alive(self, name: str) -> bool:
        if name not in self.live:
            return False
        if self.rehearse:
            return True
        from sglang_eagle3_ext.serve import server

        try:
            return server.pgid_alive(int(server.read_pid_file(Path(P.pid_file(self.ctx, name)))["pgid"]))
        except Exception:  # noqa: BLE001 - no pid file, unreadable: not a server we can use
            return False

    def stop(self, name: str) -> None:
        self.live.pop(name, None)
        if self.rehearse:
            self.call(f"stop {name}", P.stop_cmd(self.ctx, name))
            return
        pid_file = Path(P.pid_file(self.ctx, name))
        if not pid_file.exists():
            return
        self.commands += 1
        argv = P.stop_cmd(self.ctx, name)
        try:
            rc = subprocess.run(argv, capture_output=True, env=self._env(argv, None), timeout=90).returncode
        except (subprocess.TimeoutExpired, OSError, KeyboardInterrupt) as exc:  # Ctrl-C: the fast way below
            rc = -1
            self.log(f"stop {name}: {type(exc).__name__}")
        if rc != 0 and pid_file.exists():  # the last resort: the group the pid file names
            from sglang_eagle3_ext.serve import server

            with contextlib.suppress(Exception):
                server.kill_group(int(server.read_pid_file(pid_file)["pgid"]), grace=5)
        self.log(f"stop {name} -> exit {rc}")

    # -- packing --------------------------------------------------------------------------------

    def checkpoint(self, why: str) -> None:
        """OUT/<plan>.tar.gz from the results folder (logs trimmed to head and tail in the pack)."""
        (self.results / "status.json").write_text(json.dumps(
            {"plan": self.plan.name, "elapsed_s": round(self.elapsed(), 1), "live": sorted(self.live),
             "steps": self.steps}, indent=1))
        dest = self.out / f"{self.plan.name}.tar.gz"
        tmp = dest.with_name(dest.name + ".part")
        with tarfile.open(tmp, "w:gz") as tf:
            for f in sorted(self.results.rglob("*")):
                if f.is_file():
                    _add_trimmed(tf, f, f"{self.plan.name}/{f.relative_to(self.results)}")
        tmp.replace(dest)
        self.log(f"packed {dest.name} ({why})")


_PARSERS: list[argparse.ArgumentParser] = []


def _parser() -> argparse.ArgumentParser:
    """Our real CLI parser, built once (a rehearsal parses hundreds of commands)."""
    if not _PARSERS:
        from sglang_eagle3_ext import cli

        _PARSERS.append(cli.build_parser())
    return _PARSERS[0]


def _add_trimmed(tf: tarfile.TarFile, f: Path, arcname: str, keep: tuple[int, int] = (100, 200)) -> None:
    if f.suffix == ".log":
        lines = f.read_text(errors="replace").splitlines()
        if len(lines) > sum(keep):
            data = "\n".join([*lines[:keep[0]], "[...]", *lines[-keep[1]:]]).encode() + b"\n"
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime = len(data), int(f.stat().st_mtime)
            tf.addfile(info, io.BytesIO(data))
            return
    tf.add(f, arcname=arcname)


def _reap(proc: subprocess.Popen) -> int:
    try:
        return proc.wait(timeout=25)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _hard_stop(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt("hard stop")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="a plan file (tools/gpu/plans/*.yaml)")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"),
                    help="where <plan>.tar.gz and <plan>.log go (default $OUT)")
    ap.add_argument("--work", default="/tmp/run-plan", help="models, pid files and results (default /tmp/run-plan)")
    ap.add_argument("--deadline", type=float, default=None, help="no new step after this many seconds")
    ap.add_argument("--hard-stop", type=float, default=None, help="stop everything and pack at this many seconds")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--rehearse", "--dry-run", dest="rehearse", action="store_true",
                      help="print every command, check it with our CLI parser; start nothing")
    mode.add_argument("--standin", action="store_true",
                      help="run for real on a CPU: reduced shapes, stand-in servers (tests/)")
    a = ap.parse_args(argv)
    try:
        plan = P.load(a.plan)
    except P.PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work = Path(a.work).resolve()
    if not a.rehearse:  # a plan that cannot run is refused before any device time goes into it
        check = Runner(plan, Path(a.out).resolve(), work, rehearse=True)
        check.on_disk = True
        with contextlib.redirect_stdout(io.StringIO()):
            check.run()
        if check.errors:
            for e in check.errors:
                print(f"error: {e}", file=sys.stderr)
            print(f"error: {plan.path}: {len(check.errors)} problem(s); nothing started "
                  f"(--rehearse prints every command)", file=sys.stderr)
            return 1
    return Runner(plan, Path(a.out).resolve(), work, rehearse=a.rehearse, standin=a.standin,
                  deadline=a.deadline, hard_stop=a.hard_stop).run()


if __name__ == "__main__":
    raise SystemExit(main())
