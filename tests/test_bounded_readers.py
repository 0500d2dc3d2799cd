"""The one bounded reader (runtime/safeparse.py) under every document: regular files only, a size
cap, finite numbers, sane integers, limited depth; the policy's scan table inside SGLang (issue 34
case 5) and YAML presets / sweep files (case 11) through it.

Hostile files are read in a child Python with 2 GiB of address space and a short timeout: an
unbounded read (/dev/zero) is a MemoryError there and a blocking one (a FIFO) a timeout, so a
regression fails the test instead of taking this machine's memory or hanging the suite.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import safeparse, stepctl
from sglang_eagle3_ext.runtime.errors import UserError

H200 = REPO / "tests" / "data" / "policy" / "scan-h200-8b-p08.json"
BIG = "9" * 400


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def child(code: str, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """``code`` in a child Python (memory-capped, timed): what an SGLang process would do."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=_limited, stdin=subprocess.DEVNULL, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {timeout:.0f} s (a blocking read): {code[-200:]}")


def hostile_files(tmp: Path) -> dict[str, Path]:
    """A FIFO, /dev/zero behind a symlink, a folder, a dangling link and a file past the cap."""
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp / "zero.json"
    zero.symlink_to("/dev/zero")
    folder = tmp / "folder.json"
    folder.mkdir()
    dangling = tmp / "dangling.json"
    dangling.symlink_to(tmp / "nowhere.json")
    sparse = tmp / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, no block written
    return {"fifo": fifo, "zero": zero, "folder": folder, "dangling": dangling, "sparse": sparse}


NEEDLES = {"fifo": "FIFO", "zero": "character device", "folder": "folder", "dangling": "no such file",
           "sparse": "MiB"}


# ------------------------------------------------------------------ the reader itself


def test_read_bytes_refuses_special_files_before_reading(tmp_path):
    for name, p in hostile_files(tmp_path).items():
        r = child(f"from sglang_eagle3_ext.runtime import safeparse\n"
                  f"try:\n    safeparse.read_bytes({str(p)!r}, what='a test file', limit=1 << 20)\n"
                  f"except ValueError as e:\n    print('REFUSED', e)\n")
        assert r.returncode == 0 and r.stdout.startswith("REFUSED"), (name, r.stdout, r.stderr[-2000:])
        assert NEEDLES[name] in r.stdout and str(p) in r.stdout and len(r.stdout.splitlines()) == 1, (name, r.stdout)
    ok = tmp_path / "ok.json"
    ok.write_text("{\"a\": 1}")
    link = tmp_path / "link.json"
    link.symlink_to(ok)
    assert safeparse.read_bytes(link, what="x", limit=100) == b'{"a": 1}'  # a link to a regular file reads
    with pytest.raises(ValueError, match="at most 4 bytes"):
        safeparse.read_bytes(ok, what="x", limit=4)


@pytest.mark.parametrize("text,needle", [
    ('{"a": ' + BIG + "}", "400 digits"),
    ('{"a": -' + BIG + "}", "400 digits"),
    ('{"a": NaN}', "NaN"),
    ('{"a": [Infinity]}', "Infinity"),
    ('{"a": -Infinity}', "Infinity"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ("[" * 70 + "]" * 70, "nested deeper"),
])
def test_json_numbers_and_depth(text, needle):
    with pytest.raises(ValueError, match=needle):
        safeparse.json_loads(text)


def test_json_keeps_ordinary_values():
    assert safeparse.json_loads('{"t": 1733213000123456789, "x": 1e308, "y": -0.5}') == \
        {"t": 1733213000123456789, "x": 1e308, "y": -0.5}


# ------------------------------------------------------------------ case 11: YAML integers


@pytest.mark.parametrize("value", ["9" * 4301, "9" * 400, "0x" + "f" * 400, "-" + "9" * 5000])
def test_34_11_yaml_huge_integers_one_line(tmp_path, value):
    """A preset or sweep file with an integer of thousands of digits: one line naming the file and
    line (was: "unexpected ValueError at constructor.py:266: Exceeds the limit (4300 digits)")."""
    from sglang_eagle3_ext.serve import launch_config
    from sglang_eagle3_ext.tune import sweep

    f = tmp_path / "p.yaml"
    f.write_text(f"model: /m\nname: x\ntp: {value}\n")
    for load in (launch_config.load_preset, sweep.load_spec):
        with pytest.raises(UserError) as e:
            load(str(f))
        assert "digits" in str(e.value) and "line 3" in str(e.value) and "\n" not in str(e.value)


def test_34_11_yaml_cli_no_bug_line(tmp_path, capsys):
    f = tmp_path / "p.yaml"
    f.write_text("model: /m\ntp: " + "9" * 4301 + "\n")
    assert cli.main(["launch", str(f), "--dry-run", "--no-sglang-check"]) == 2
    err = capsys.readouterr().err
    assert "a bug" not in err and len(err.strip().splitlines()) == 1 and "digits" in err, err


# ------------------------------------------------------------------ case 5: the policy file in SGLang


def _scan_with(path: Path, mutate) -> Path:
    doc = json.loads(H200.read_text())
    text = mutate(copy.deepcopy(doc))
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return path


def _big_in(field: str):
    def m(doc):
        doc["cells"][0][field] = [0.5] if field == "per_position" else 1
        text = json.dumps(doc)
        key = f'"{field}": [0.5]' if field == "per_position" else f'"{field}": 1'
        return text.replace(key, f'"{field}": [{BIG}]' if field == "per_position" else f'"{field}": {BIG}', 1)
    return m


def _policy_cases(tmp: Path) -> dict[str, Path]:
    files = {k: v for k, v in hostile_files(tmp).items()}
    files["deep"] = tmp / "deep.json"
    files["deep"].write_text("[" * 100_000 + "]" * 100_000)
    for field in ("cycle_ms", "cycles", "accept_len", "per_position"):
        files[f"big-{field}"] = _scan_with(tmp / f"big-{field}.json", _big_in(field))
    return files


def test_34_5_policy_file_in_sglang_process_is_bounded(tmp_path):
    """SGLANG_EAGLE3_POLICY at /dev/zero, a FIFO, 100 000-deep nesting, 400-digit integers in
    cycle_ms / cycles / accept_len / per_position: ``load_table`` (inside SGLang's scheduler) says
    one line with a ValueError, never MemoryError / a hang / RecursionError / OverflowError."""
    for name, p in _policy_cases(tmp_path).items():
        r = child("from sglang_eagle3_ext.runtime import policy\n"
                  f"try:\n    policy.load_table({str(p)!r})\n"
                  "except ValueError as e:\n    print('REFUSED', e)\n")
        assert r.returncode == 0 and r.stdout.startswith("REFUSED"), (name, r.stdout, r.stderr[-1500:])
        assert len(r.stdout.strip().splitlines()) == 1, (name, r.stdout)


def test_34_5_init_hook_refuses_with_one_line(tmp_path, monkeypatch):
    """The init_states hook turns whatever the policy file is into the server's one refusal line."""
    class Ctrl:
        _states = {1: object(), 2: object(), 3: object()}
        params = None
        worker = None

    hook = stepctl.init_hook("policy", check=lambda: [])
    for name, p in _policy_cases(tmp_path).items():
        if name in ("fifo", "zero", "sparse"):
            continue  # read in the child above; here the in-process conversion
        monkeypatch.setenv("SGLANG_EAGLE3_POLICY", str(p))
        with pytest.raises(RuntimeError) as e:
            hook(lambda self: None, Ctrl())
        assert str(e.value).startswith("sglang-eagle3-ext: ") and "\n" not in str(e.value), name
    stepctl.install(None)


def test_34_5_launch_policy_hostile_files_one_line(tmp_path, capsys, monkeypatch):
    """`launch --policy` reads the file with the same reader before anything starts: exit 2, one
    line, never "unexpected OverflowError at policy.py ... (a bug in sgl-eagle3)"."""
    from test_flags import write_model

    from sglang_eagle3_ext.serve import releases

    root = str(releases.fetch("0.5.23"))
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    t = write_model(tmp_path / "t", "LlamaForCausalLM")
    d = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    files = _policy_cases(tmp_path)
    argv = ["launch", "--sglang-root", root, "--model", str(t), "--draft", str(d), "--no-sglang-check",
            "--dry-run", "--policy"]
    for name, p in files.items():
        if name in ("fifo", "zero", "sparse"):  # in a capped, timed child
            r = child("import sys\nfrom sglang_eagle3_ext import cli\n"
                      f"sys.exit(cli.main({argv + [str(p)]!r}))\n")
            rc, err = r.returncode, r.stderr
        else:
            rc = cli.main(argv + [str(p)])
            err = capsys.readouterr().err
        assert rc == 2 and "a bug" not in err and len(err.strip().splitlines()) == 1, (name, err)
        assert "no such file" not in err or name in ("dangling", "folder"), (name, err)  # the reason


# ------------------------------------------------------------------ case 6: scan.json readers

SCAN = REPO / "docs/data/h200-2026-12-02-r8/moe5/scan-moe/scan.json"


def _scan_mutants() -> list[tuple[str, bytes]]:
    """The issue's named edits of a real scan.json, then seeded structural ones."""
    import random

    from test_fuzz_inputs import _mutate_tree

    doc = json.loads(SCAN.read_text())

    def edit(f):
        d = copy.deepcopy(doc)
        f(d)
        return json.dumps(d).encode()

    named = [
        ("cycle_ms-text", edit(lambda d: d["cells"][0].update(cycle_ms="2.0"))),
        ("tok_s-text", edit(lambda d: d["cells"][0].update(per_stream_tok_s="x"))),
        ("no-level", edit(lambda d: [c.pop("level") for c in d["cells"]])),
        ("adaptive-tiers-5", edit(lambda d: d.update(adaptive={"tiers": 5}))),
        ("tok_s-infinity", json.dumps(doc).replace('"per_stream_tok_s": 235.28', '"per_stream_tok_s": Infinity', 1).encode()),
        ("steps-400-digits", json.dumps(doc).replace('"steps": 3', '"steps": ' + BIG, 1).encode()),
        ("baseline-text", edit(lambda d: d.update(baseline={"1": {"per_stream_tok_s": "x", "throughput_tok_s": 1}}))),
        ("best-number", edit(lambda d: d.update(best={"1": 5}))),
        ("memory-text", edit(lambda d: d["memory"].update(measured={"total_gib": "x"}))),
        ("client-null-agg", edit(lambda d: d["client"]["1"].update(aggregate={"per_stream_tok_s": None}))),
        ("levels-text", edit(lambda d: d.update(levels="1,8"))),
        ("cells-list-of-int", edit(lambda d: d.update(cells=[1, 2]))),
        ("per_position-long", edit(lambda d: d["cells"][0].update(per_position=[0.5] * 9))),
        ("deep", b"[" * 100_000 + b"]" * 100_000),
    ]
    rng = random.Random(34)
    return named + [(f"mutant-{i}", json.dumps(_mutate_tree(rng, doc)).encode()) for i in range(20)]


def _scan_readers(folder: Path, tmp: Path) -> list[list[str]]:
    from sglang_eagle3_ext.serve import releases

    root = str(releases.fetch("0.5.23"))
    return [["sweep", "--report", str(folder)], ["compare", str(folder), "--json"],
            ["adaptive", "write", "--from", str(folder), "--out", str(tmp / "a.json"), "--sglang-root", root]]


def test_34_6_scan_json_readers_one_line(tmp_path, capsys):
    """Edited scan.json through sweep --report, compare and adaptive write --from: each reads it
    or refuses with one line (exit 2); never "a bug" (was 27 / 6 / 6 of 103 mutants), and an
    Infinity tok/s is refused, not chosen."""
    folder = tmp_path / "scan"
    folder.mkdir()
    for name, data in _scan_mutants():
        (folder / "scan.json").write_bytes(data)
        for argv in _scan_readers(folder, tmp_path):
            rc = cli.main(argv)
            c = capsys.readouterr()
            assert "a bug" not in c.err and "Traceback" not in c.err, (name, argv[0], c.err)
            if rc:
                lines = [x for x in c.err.splitlines() if x.strip()]
                assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), (name, argv[0], c.err)
            elif not name.startswith("mutant"):
                pytest.fail(f"{name}: {argv[0]} accepted it\n{c.out[-500:]}")


def test_34_6_scan_json_special_files(tmp_path):
    """A scan.json that is a FIFO, /dev/zero or 1 GiB: refused by every reader before a read."""
    for name, p in hostile_files(tmp_path).items():
        if name in ("folder", "dangling"):
            continue
        folder = tmp_path / f"scan-{name}"
        folder.mkdir()
        (folder / "scan.json").symlink_to(p)
        for argv in _scan_readers(folder, tmp_path):
            r = child(f"import sys\nfrom sglang_eagle3_ext import cli\nsys.exit(cli.main({argv!r}))\n")
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            assert r.returncode == 2 and len(lines) == 1 and NEEDLES[name] in lines[0], (name, argv[0], r.stderr)


# ------------------------------------------------------------------ case 7: probe records' control

POLICY_PROF = REPO / "docs/data/h200-2026-12-02-r8/8bp/policy/configs/eagle3-s5-k1-d6-no-nccl/prof.jsonl"


def _control_variants() -> list[tuple[str, Any]]:
    nan = float("nan")
    return [
        ("choices-nan", lambda c: c.update(choices={"1": {"2": nan}})),
        ("choices-text", lambda c: c.update(choices={"1": {"2": "x"}})),
        ("choices-list", lambda c: c.update(choices=[1, 2])),
        ("choices-key-word", lambda c: c.update(choices={"one": {"2": 3}})),
        ("choices-row-number", lambda c: c.update(choices={"1": 5})),
        ("choices-huge", lambda c: c.update(choices={"1": {"2": 10**30}})),
        ("candidates-text", lambda c: c.update(candidates="1,2")),
        ("candidates-words", lambda c: c.update(candidates=["a"])),
        ("block-text", lambda c: c.update(block="x")),
        ("decider-number", lambda c: c.update(decider=5)),
        ("switches-many", lambda c: c["policy"].update(switches="many")),
        ("chosen-nan", lambda c: c["policy"].update(chosen={"1": {"5": nan}})),
        ("expected-text", lambda c: c["policy"].update(expected_per_stream_tok_s={"1": {"5": "fast"}})),
        ("expected-row-list", lambda c: c["policy"].update(expected_per_stream_tok_s={"1": [1]})),
        ("explore-negative", lambda c: c["policy"].update(explore={"1": {"5": -3}})),
        ("rates-text", lambda c: c["policy"].update(rates="high")),
        ("tiers-list", lambda c: c["policy"].update(tiers=[5])),
        ("policy-list", lambda c: c.update(policy=[1])),
        ("control-text", None),
        ("unmatched-nan", lambda c: c.update(unmatched_accepts=nan)),
    ]


def test_34_7_profile_on_odd_control_fields(tmp_path, capsys):
    """`profile` on /3 records whose `control` (the hold / policy part) is odd: read, or one line
    naming the file:line and the field; never "a bug" (was 8 of 15 variants)."""
    lines = [json.loads(x) for x in POLICY_PROF.read_text().splitlines()[:6] if x.strip()]
    f = tmp_path / "p.jsonl"
    for name, mutate in _control_variants():
        recs = copy.deepcopy(lines)
        if mutate is None:
            recs[2]["control"] = "held"
        else:
            mutate(recs[2]["control"])
        f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        for extra in ([], ["--json"]):
            rc = cli.main(["profile", str(f), *extra])
            c = capsys.readouterr()
            assert "a bug" not in c.err and "Traceback" not in c.err, (name, c.err)
            assert rc == 2 and f"{f}:3:" in c.err and "control" in c.err, (name, rc, c.err)
            assert len(c.err.strip().splitlines()) == 1, (name, c.err)


# ------------------------------------------------------------------ case 10: the benchmarks' readers

LADDER = REPO / "docs/data/h200-2026-12-01/8b-p08/p08/configs/eagle3-s5-k1-d6-no-nccl/ladder.json"


def _bench_script(name: str, argv: list[str]) -> subprocess.CompletedProcess:
    return child(f"import sys\nsys.path.insert(0, {str(REPO / 'benchmarks')!r})\nimport {name}\n"
                 f"sys.exit({name}.main({argv!r}))\n", timeout=60)


def _one_line_exit_2(r: subprocess.CompletedProcess, what: str) -> None:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (what, r.returncode, r.stderr[-1500:])


def test_34_10_policy_sim_hostile_tables(tmp_path):
    """benchmarks/policy_sim.py: a valid --steps 0,1 scan (was IndexError), --tokens 0 / -5 (was
    ZeroDivisionError), deep / huge-integer files, /dev/zero, a FIFO: a result or one line, exit 2."""
    doc = json.loads(H200.read_text())
    two = dict(doc, candidates=[0, 1], cells=[c for c in doc["cells"] if c["steps"] in (0, 1)])
    (tmp_path / "s01.json").write_text(json.dumps(two))
    r = _bench_script("policy_sim", ["--table", str(tmp_path / "s01.json"), "--tokens", "64", "--json"])
    assert r.returncode == 0 and json.loads(r.stdout)[0]["table"], r.stderr[-1500:]
    for tokens in ("0", "-5"):
        _one_line_exit_2(_bench_script("policy_sim", ["--table", "synthetic", "--tokens", tokens]), tokens)
    files = _policy_cases(tmp_path)
    for name, p in files.items():
        for flag in ("--table", "--walks"):
            _one_line_exit_2(_bench_script("policy_sim", [flag, str(p), "--tokens", "64"]), (name, flag))


def _ladder_variants(tmp: Path) -> dict[str, Path]:
    doc = json.loads(LADDER.read_text())
    out = {}

    def put(name, d):
        out[name] = tmp / f"{name}.json"
        out[name].write_text(d if isinstance(d, str) else json.dumps(d))

    failed = copy.deepcopy(doc)
    for lv in failed["levels"]:
        for r in lv["bench"]["runs"]:
            r["completion_tokens"] = 0
    put("all-failed", failed)
    put("a-list", [doc])
    put("int-levels", dict(doc, levels=[1, 8]))
    nulls = copy.deepcopy(doc)
    nulls["levels"][0]["summary"] = None
    put("summary-null", nulls)
    put("nan-tokens", json.dumps(doc).replace('"completion_tokens": 256', '"completion_tokens": NaN', 1))
    put("huge-index", json.dumps(doc).replace('"index": 0', '"index": ' + BIG, 1))
    return out


def test_34_10_transition_hostile_ladders(tmp_path):
    """benchmarks/transition.py on a ladder whose runs all failed (was ZeroDivisionError), a JSON
    list, integer levels, summary null, NaN tokens (were AttributeError), alone and --paired (NaN
    printed "+nan %"): one line, exit 2."""
    for name, p in _ladder_variants(tmp_path).items():
        _one_line_exit_2(_bench_script("transition", [str(p)]), name)
        _one_line_exit_2(_bench_script("transition", [str(LADDER), str(p), "--paired", LADDER.parent.name]), name)
    for name, p in hostile_files(tmp_path).items():
        _one_line_exit_2(_bench_script("transition", [str(p)]), name)
