"""GPU campaign plans (tools/gpu/plans/*.yaml) and their runner (tools/gpu/run_plan.py).

Every plan parses and its rehearsal passes: each of our commands goes through the real CLI parser,
each input file exists or an earlier step makes it. Bad plans get one clear problem each. The
runner itself runs for real with CPU stand-ins: what is faked and why: no GPU, so the servers are
tests/standin_openai.py (real subprocesses started by `sgl-eagle3 launch --detach`, real HTTP on
127.0.0.1, stopped by `sgl-eagle3 stop`) on a placeholder model folder (config.json only).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from test_flags import write_model
from test_server import free_port

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "tools" / "gpu"
PLANS = sorted((GPU / "plans").glob("*.yaml"))
sys.path.insert(0, str(GPU))

import plan_file as P  # noqa: E402
import run_plan  # noqa: E402

from sglang_eagle3_ext.serve import server  # noqa: E402


def rehearse(path: Path, tmp_path: Path) -> tuple[int, str, run_plan.Runner]:
    plan = P.load(path)
    r = run_plan.Runner(plan, tmp_path / "out", tmp_path / "work", rehearse=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = r.run()
    return rc, buf.getvalue(), r


@pytest.mark.parametrize("path", PLANS, ids=[p.stem for p in PLANS])
def test_every_plan_parses_and_its_rehearsal_passes(path, tmp_path):
    plan = P.load(path)
    assert plan.name == path.stem  # bg.sh and the packs name files after it
    assert isinstance(plan.doc.get("made"), list) and plan.doc.get("about") and plan.doc.get("run")
    for folder in plan.doc["made"]:
        assert (REPO / folder / "README.md").exists(), folder
    rc, out, r = rehearse(path, tmp_path)
    assert rc == 0 and r.errors == [], out
    assert r.commands > 0
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()  # nothing made


def test_every_data_folder_names_the_plan_that_made_it():
    made = {f for p in PLANS for f in yaml.safe_load(p.read_text())["made"]}
    folders = {f"docs/data/{d.name}" for d in (REPO / "docs" / "data").iterdir() if d.is_dir()}
    assert folders <= made, sorted(folders - made)
    readme = (GPU / "README.md").read_text()
    for p in PLANS:
        for folder in yaml.safe_load(p.read_text())["made"]:
            row = [ln for ln in readme.splitlines() if ln.startswith("|") and folder.split("/")[-1] in ln]
            assert row and any(f"plans/{p.name}" in ln for ln in row), (folder, p.name)


def test_slim_keeps_what_the_plans_read():
    """slim.sh moves raw data out before a device call: never a file a plan's copy phase reads."""
    script = 'eval "$(sed -n "/^MOVE=/,/)$/p" tools/gpu/slim.sh)"; printf "%s\\n" "${MOVE[@]}"'
    moved = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(moved) > 20 and "docs/data/h200-2026-12-01/moe" in moved
    read = {m for p in PLANS for m in re.findall(r"\{repo\}/(docs/data/[^\"' ]+)", p.read_text())}
    assert read
    for f in read:
        assert (REPO / f).exists(), f
        assert not [m for m in moved if f == m or f.startswith(m + "/")], f


def test_the_quickstart_plan_is_the_readme_path(tmp_path):
    """tiny --shape llama3-8b, scan --baseline over steps 1-5 at 1 and 8 streams, launch --policy
    on that scan's table, a short bench of that server."""
    rc, out, _ = rehearse(GPU / "plans" / "quickstart.yaml", tmp_path)
    cmds = [ln.strip()[2:] for ln in out.splitlines() if ln.strip().startswith("$ ")]
    order = [next(i for i, c in enumerate(cmds) if f"sglang_eagle3_ext {w}" in c)
             for w in ("tiny", "scan", "launch", "bench")]
    assert rc == 0 and order == sorted(order)
    tiny, scan, launch = cmds[order[0]], cmds[order[1]], cmds[order[2]]
    assert "--shape llama3-8b" in tiny
    assert "--baseline" in scan and "--steps 1-5" in scan and "--concurrency 1,8" in scan
    scan_out = re.search(r"--out (\S+)", scan).group(1)
    assert f"--policy {scan_out}/scan.json" in launch


def write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def base(**phase) -> dict:
    return {"name": "t", "about": "a test plan", "made": [], "run": "-",
            "phases": [{"build": {"m": {"acceptance": "0.8"}}}, phase]}


def server_phase(**extra) -> dict:
    return {"serve": {"servers": [{"name": "a", "build": "m", "steps": 2}], **extra}}


@pytest.mark.parametrize("doc, says", [
    ({"name": "t", "about": "x", "made": [], "run": "-", "phases": [], "deadlin": 5}, "unknown key(s) ['deadlin']"),
    ({"name": "t", "phases": []}, "missing 'about'"),
    ({"name": "a b", "about": "x", "made": [], "run": "-", "phases": []}, "letters, digits"),
    (base(serve={"servers": [{"name": False, "build": "m"}]}), "quote YAML words such as off"),
    (base(serve={"servers": [{"name": "a", "build": "m", "stepz": 2}]}), "server a: unknown key(s) ['stepz']"),
    (base(serve={"servers": [{"name": "a"}]}), "needs 'build'"),
    (base(serve={"servers": [{"name": "a", "build": "m"}], "workload": [{"bensh": {}}]}), "exactly one of"),
    (base(serve={}), "serve needs servers"),
    (base(scan="x"), "scan is a mapping"),
])
def test_a_bad_plan_is_one_line(tmp_path, doc, says):
    with pytest.raises(P.PlanError, match=re.escape(says)):
        P.load(write(tmp_path, doc))


@pytest.mark.parametrize("phase, says", [
    (server_phase(workload=[{"bench": {"name": "b", "args": {"max_tokenz": 3}}}]),
     "our CLI refuses it: sgl-eagle3: error: unrecognized arguments: --max-tokenz 3"),
    ({"serve": {"servers": [{"name": "a", "build": "m", "policy": "{results}/scan/scan.json"}]}},
     "policy file"),
    ({"serve": {"servers": [{"name": "a", "build": "nobuild", "steps": 2}]}},
     "nobuild/target, which no earlier step makes"),
    ({"serve": {"servers": [{"name": "a", "build": "m", "adaptive": "{repo}/docs/nothing.json"}]}},
     "adaptive file"),
    (server_phase(workload=[{"bench": {"name": "b", "servers": ["zz"]}}]), "names server zz"),
    (server_phase(workload=[{"counter_check": {}}]), "needs probes on and env EAGLE3_PROFILE_TOGGLE"),
    (server_phase(workload=[{"identity": {"reference": "zz", "prompts": "{repo}/README.md"}}]),
     "reference zz is not running"),
    (server_phase(use=["gone"]), "uses gone, which no earlier phase keeps running"),
    ({"copy": {"x.json": "{repo}/docs/data/none.json"}}, "does not exist"),
])
def test_the_rehearsal_names_what_cannot_run(tmp_path, phase, says):
    rc, out, r = rehearse(write(tmp_path, base(**phase)), tmp_path)
    assert rc == 1 and any(says in e for e in r.errors), r.errors
    assert f"error: {r.errors[0]}" in out


def test_server_flags_are_checked_against_the_release_the_plan_runs(tmp_path):
    """The bundle's SGLang (0.5.16) is the one whose flags count: a typo after `--` is named."""
    from sglang_eagle3_ext.serve import releases

    releases.fetch(P.SGLANG)
    doc = base(serve={"servers": [{"name": "a", "build": "m", "steps": 2, "args": ["--cuda-graph-max-bz", "8"]}]})
    _, _, r = rehearse(write(tmp_path, doc), tmp_path)
    assert r.errors == ["start a: SGLang 0.5.16 has no --cuda-graph-max-bz"]


def test_a_server_name_twice_is_refused_and_an_unknown_placeholder_too(tmp_path):
    twice = base(serve={"servers": [{"name": "a", "build": "m", "steps": 2}]})
    twice["phases"].append(twice["phases"][1])
    _, _, r = rehearse(write(tmp_path, twice), tmp_path)
    assert any("server name a used twice" in e for e in r.errors)
    bad = base(copy={"x": "{reop}/a"})
    _, _, r = rehearse(write(tmp_path, bad), tmp_path)
    assert any("unknown placeholder 'reop'" in e for e in r.errors)


def test_a_kept_server_serves_every_server_of_a_one_at_a_time_phase(tmp_path):
    srv = {"build": "m", "steps": 2}
    bench = {"bench": {"name": "b", "args": {"runs": 1}}}
    doc = base(serve={"keep": ["a"], "servers": [{"name": "a", **srv}], "workload": [bench]})
    doc["phases"].append({"serve": {"use": ["a"], "one_at_a_time": True, "workload": [bench],
                                    "servers": [{"name": "c", **srv}, {"name": "d", **srv}]}})
    rc, out, _ = rehearse(write(tmp_path, doc), tmp_path)
    steps = [ln[2:] for ln in out.splitlines() if ln.startswith("# ")]
    assert rc == 0 and steps.count("bench a b") == 3, steps
    assert steps.index("stop c") < steps.index("start d") < steps.index("stop d") < steps.index("stop a")


def test_the_cli_of_the_runner(tmp_path, capsys):
    assert run_plan.main([str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    bad = write(tmp_path, base(serve={"servers": [{"name": "a", "build": "m", "policy": "{results}/x.json"}]}))
    assert run_plan.main([str(bad), "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert "problem(s); nothing started" in err and "x.json" in err and not (tmp_path / "w").exists()
    assert run_plan.main([str(GPU / "plans" / "smoke.yaml"), "--dry-run", "--work", str(tmp_path)]) == 0
    assert "rehearsal of smoke: 4 commands, no problem found" in capsys.readouterr().out


def test_options_rounds_and_merged_flags():
    assert P.options({"max_tokens": 256, "ignore_eos": True, "flush_cache": False, "concurrency": [1, 8],
                      "request_rate": 0.5}) == ["--max-tokens", "256", "--ignore-eos", "--concurrency", "1,8",
                                                "--request-rate", "0.5"]
    rounds = P.bench_rounds({"bench": {"name": "s", "vary": {"request_rate": [8, 2]}, "repeat": 2, "first": 3,
                                       "args": {"seed": 42}}})
    assert [t for t, _ in rounds] == ["r8-k3", "r2-k4", "r8-k5", "r2-k6"]
    assert rounds[1][1] == {"seed": 42, "request_rate": 2}
    assert [t for t, _ in P.bench_rounds({"bench": {"name": "w"}})] == [""]
    assert P.merge_args(["--mem-fraction-static", "0.85", "--enable-metrics"],
                        ["--mem-fraction-static", "0.9", "--max-total-tokens", "16384"]) == [
        "--mem-fraction-static", "0.9", "--enable-metrics", "--max-total-tokens", "16384"]


# ------------------------------------------------------------------------------------------------
# The runner for real, on CPU stand-ins


def standin_plan(tmp_path: Path, port: int, *, hard_stop: float = 120, long_bench: bool = False) -> Path:
    models = tmp_path / "work" / "models" / "m"
    write_model(models / "target", "LlamaForCausalLM")
    srv = {"build": "m", "no_spec": True, "max_running": 4}
    work = [{"bench": {"name": "closed", "args": {"runs": 1, "warmup": 0, "max_tokens": 8}, "timeout": 60}},
            {"bench": {"name": "serving", "vary": {"request_rate": [40, 20]}, "alternate": True,
                       "args": {"num_requests": 3, "max_tokens": 8}, "timeout": 60}},
            {"metrics": "end"}]
    if long_bench:
        work = [{"bench": {"name": "long", "args": {"request_rate": 0.2, "num_requests": 50, "max_tokens": 8},
                           "timeout": 300}}]
    doc = {"name": "cpu", "about": "stand-ins", "made": [], "run": "-", "deadline": hard_stop, "hard_stop": hard_stop,
           "phases": [{"serve": {"port": port, "keep": ["a"], "servers": [{"name": "a", **srv}, {"name": "b", **srv}],
                                 "workload": work}},
                      {"serve": {"use": ["a"], "one_at_a_time": True, "servers": [{"name": "c", **srv}],
                                 "workload": [{"bench": {"name": "closed", "servers": ["c"],
                                                         "args": {"runs": 1, "warmup": 0, "max_tokens": 8}}}]}}]}
    return write(tmp_path, doc)


def pgids(results: Path) -> list[int]:
    """The process groups `launch --detach` reported ready."""
    return [int(m) for f in results.glob("*/launch.txt") for m in re.findall(r"pgid (\d+)", f.read_text())]


@pytest.mark.slow
def test_the_runner_starts_benches_keeps_and_stops_servers_and_packs(tmp_path):
    path = standin_plan(tmp_path, free_port())
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(GPU / "run_plan.py"), str(path), "--standin", "--out", str(out),
                        "--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    with tarfile.open(out / "cpu.tar.gz") as tf:
        names = set(tf.getnames())
        status = json.load(tf.extractfile("cpu/status.json"))
    for f in ("a/closed.json", "b/closed.json", "a/serving-r40-k0.json", "b/serving-r20-k1.json", "c/closed.json",
              "a/server.log", "a/launch.txt"):
        assert f"cpu/{f}" in names, sorted(names)
    assert "cpu/a/serving-r40-k0.txt" in names and "cpu/b/closed.json" in names
    states = {s["step"]: s["state"] for s in status["steps"]}
    assert all(v == "ok" for v in states.values()), states
    log = (out / "cpu.log").read_text()
    assert "/metrics of http://127.0.0.1" in log  # scraped (the stand-in serves no /metrics without --spec)
    # round 2 runs the servers in the other order; server a (kept) served phase 2 beside c
    assert log.index("bench b serving r20-k1") < log.index("bench a serving r20-k1")
    assert log.index("stop b") < log.index("starting c") < log.index("stop a")
    doc = json.loads((tmp_path / "work" / "results" / "cpu" / "a" / "serving-r40-k0.json").read_text())
    assert doc.get("label") == "a" or "a" in json.dumps(doc)[:2000]
    groups = pgids(tmp_path / "work" / "results" / "cpu")
    assert len(groups) == 3 and not any(server.pgid_alive(g) for g in groups)


@pytest.mark.slow
def test_a_hard_stop_stops_every_server_and_keeps_what_finished(tmp_path):
    """SIGTERM (what the hard stop's alarm does) mid-bench: the bench gets Ctrl-C, both servers are
    stopped, the pack holds the status with the interrupted step."""
    path = standin_plan(tmp_path, free_port(), long_bench=True, hard_stop=900)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(GPU / "run_plan.py"), str(path), "--standin", "--out", str(out),
                             "--work", str(tmp_path / "work")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        log = out / "cpu.log"
        until = time.monotonic() + 240
        while time.monotonic() < until and not (log.exists() and "b healthy" in log.read_text()):
            time.sleep(0.3)
        time.sleep(2)  # inside the long bench (50 requests at 0.2 req/s) now
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "interrupted: hard stop" in text, text[-3000:]
    with tarfile.open(out / "cpu.tar.gz") as tf:
        status = json.load(tf.extractfile("cpu/status.json"))
    assert any(s["state"] == "interrupted" for s in status["steps"]), status
    assert not any(s["step"].startswith("start c") for s in status["steps"])  # nothing new after the stop
    groups = pgids(tmp_path / "work" / "results" / "cpu")
    assert len(groups) == 2 and not any(server.pgid_alive(g) for g in groups), text[-3000:]


def test_copy_phases_and_a_fresh_results_folder_each_run(tmp_path):
    """A real run without servers: `copy` takes whole files, a file's first lines, JSONL rows that
    match; a second run on the same work folder starts from an empty results folder."""
    doc = {"name": "c", "about": "copies", "made": [], "run": "-", "phases": [{"copy": {
        "whole.json": "{repo}/docs/data/h200-2026-12-01/adaptive-p08.json",
        "two.jsonl": {"from": "{repo}/examples/prompts-trees.jsonl", "lines": 2},
        "hard.jsonl": {"from": "{repo}/examples/prompts-trees.jsonl", "match": {"category": "hard"}}}}]}
    path, work, out = write(tmp_path, doc), tmp_path / "work", tmp_path / "out"
    stale = work / "results" / "c" / "stale.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    assert run_plan.main([str(path), "--out", str(out), "--work", str(work)]) == 0
    res = work / "results" / "c"
    assert not stale.exists()
    assert (res / "whole.json").read_bytes() == (REPO / "docs/data/h200-2026-12-01/adaptive-p08.json").read_bytes()
    assert len((res / "two.jsonl").read_text().splitlines()) == 2
    hard = [json.loads(x) for x in (res / "hard.jsonl").read_text().splitlines()]
    assert hard and {r["category"] for r in hard} == {"hard"}
    with tarfile.open(out / "c.tar.gz") as tf:
        assert {"c/whole.json", "c/two.jsonl", "c/hard.jsonl", "c/status.json"} <= set(tf.getnames())
