"""Fuzzed inputs through the real CLI (a subprocess each): malformed launch presets, patch
manifests, probe files (JSONL and text logs), bench result documents, sweep YAML and sweep
results. Every run either succeeds or exits non-zero with ONE line on stderr; never a traceback.

Inputs are seeded (random bytes, truncations, byte flips, and structural mutations of a valid file:
a value swapped for another type, numbers as strings, a key dropped), so a failure reproduces.
Pid files are left to tests/test_stop_guard.py: a mutated pgid must never reach kill().
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_patch_crash import _files, _restore, _trimmed_copy

from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.runtime.sglang_env import locate

SEED = 18
PER_KIND = 6
BENCH = REPO / "docs/data/h200-2026-11-29/run4/e2e/off/configs/eagle3-s2-k1-d3-no-nccl/bench.json"
RESULTS = REPO / "docs/data/h200-2026-11-29/run4/e2e/off/results.json"
PROBES = REPO / "tests/data/profile/synthetic_k5.jsonl"
PROBE_LOG = REPO / "tests/data/profile/seeds_002_excerpt.log"
PRESET = REPO / "launch/kimi-k25-eagle3.yaml"
SWEEP = REPO / "examples/sweep-tiny.yaml"
ODD = [None, True, -1, 0, 1e308, "12", "abc", [], {}, [1, "x"], {"a": None}, "\u00ff" * 3]


def _mutate_tree(rng: random.Random, doc):
    """One structural change somewhere in a JSON/YAML tree: swap a value, drop a key, stringify."""
    doc = copy.deepcopy(doc)
    paths = []

    def walk(node, trail):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((trail, k))
                walk(v, trail + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append((trail, i))
                walk(v, trail + [i])

    walk(doc, [])
    if not paths:
        return rng.choice(ODD)
    for _ in range(rng.randint(1, 3)):
        trail, key = rng.choice(paths)
        parent = doc
        try:
            for t in trail:
                parent = parent[t]
            old = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        r = rng.random()
        if r < 0.3 and isinstance(parent, dict):
            del parent[key]
        elif r < 0.6 and isinstance(old, (int, float)) and not isinstance(old, bool):
            parent[key] = str(old)  # numbers given as strings
        else:
            parent[key] = rng.choice(ODD)
    return doc


def variants(data: bytes, kind: str, rng: random.Random) -> list[bytes]:
    out = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 400))),  # random bytes
           data[: rng.randint(1, max(1, len(data) - 1))]]  # truncated
    flipped = bytearray(data)
    for _ in range(8):
        i = rng.randrange(len(flipped))
        flipped[i] = rng.getrandbits(8)
    out.append(bytes(flipped))
    while len(out) < PER_KIND:
        if kind == "json":
            out.append(json.dumps(_mutate_tree(rng, json.loads(data))).encode())
        elif kind == "jsonl":
            lines = [json.loads(x) for x in data.decode().splitlines() if x.strip()]
            lines[rng.randrange(len(lines))] = _mutate_tree(rng, rng.choice(lines))
            out.append("\n".join(json.dumps(x) for x in lines).encode())
        elif kind == "yaml":
            out.append(yaml.safe_dump(_mutate_tree(rng, yaml.safe_load(data))).encode())
        else:
            text = data.decode().splitlines()
            i = rng.randrange(len(text))
            text[i] = text[i][: rng.randrange(len(text[i]) + 1)] + "x 1e999 nan -- :"
            out.append("\n".join(text).encode())
    return out


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SGLANG_EAGLE3_DEBUG="1")  # the last-resort handler off: real tracebacks show
    return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd, stdin=subprocess.DEVNULL)


def check(r: subprocess.CompletedProcess, what: str) -> None:
    assert "Traceback" not in r.stderr, f"{what}:\n{r.stderr[-3000:]}"
    if r.returncode != 0:
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("sglang-eagle3-ext:")]
        assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: rc {r.returncode}\n{r.stderr}"


def _cases(path: Path, kind: str, salt: int, extra: list[bytes] = ()):
    rng = random.Random(SEED * 1000 + salt)
    return [pytest.param(i, d, id=f"{path.stem}-{i}")
            for i, d in enumerate(variants(path.read_bytes(), kind, rng) + list(extra))]


def _stringify_numbers(node):
    if isinstance(node, dict):
        return {k: _stringify_numbers(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_stringify_numbers(v) for v in node]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return str(node)
    return node


def _drop(doc: dict, *keys: str) -> bytes:
    doc = copy.deepcopy(doc)
    for k in keys:
        doc.pop(k, None)
    return json.dumps(doc).encode()


_PROBE_LINES = [json.loads(x) for x in PROBES.read_text().splitlines() if x.strip()]
_BENCH_DOC = json.loads(BENCH.read_text())
_RESULTS_DOC = json.loads(RESULTS.read_text())
# the cases issue 18 names, always run (beside the random ones)
PROBES_NAMED = ["\n".join(json.dumps(_stringify_numbers(x)) for x in _PROBE_LINES).encode()]
BENCH_NAMED = [_drop(_BENCH_DOC, "summary"), json.dumps(_stringify_numbers(_BENCH_DOC)).encode(),
               json.dumps({**_BENCH_DOC, "summary": {"decode_tok_s": {}}}).encode()]
RESULTS_NAMED = [json.dumps({**_RESULTS_DOC, "configs": "x"}).encode(),
                 json.dumps({**_RESULTS_DOC, "configs": [{"name": 1}]}).encode(), b"[]",
                 json.dumps(_stringify_numbers(_RESULTS_DOC)).encode()]


@pytest.mark.parametrize("i,data", _cases(PRESET, "yaml", 1))
def test_fuzz_launch_preset(tmp_path, i, data):
    f = tmp_path / "p.yaml"
    f.write_bytes(data)
    check(cli("launch", str(f), "--dry-run", "--no-sglang-check"), f"preset #{i}")


@pytest.mark.parametrize("i,data", _cases(PROBES, "jsonl", 2, PROBES_NAMED) + _cases(PROBE_LOG, "text", 3))
def test_fuzz_probe_files(tmp_path, i, data):
    f = tmp_path / "probes.jsonl"
    f.write_bytes(data)
    check(cli("profile", str(f), "--json"), f"probe file #{i}")


@pytest.mark.parametrize("i,data", _cases(BENCH, "json", 4, BENCH_NAMED) + _cases(RESULTS, "json", 5, RESULTS_NAMED))
def test_fuzz_compare(tmp_path, i, data):
    f = tmp_path / "bench.json"
    f.write_bytes(data)
    check(cli("compare", str(f), str(BENCH), "--json"), f"bench doc #{i}")


@pytest.mark.parametrize("i,data", _cases(SWEEP, "yaml", 6))
def test_fuzz_sweep_yaml(tmp_path, i, data):
    f = tmp_path / "sweep.yaml"
    f.write_bytes(data)
    check(cli("sweep", str(f), "--plan", "--out", str(tmp_path / "out")), f"sweep yaml #{i}")


@pytest.mark.parametrize("i,data", _cases(RESULTS, "json", 7, RESULTS_NAMED))
def test_fuzz_sweep_results(tmp_path, i, data):
    (tmp_path / "results.json").write_bytes(data)
    check(cli("sweep", "--report", str(tmp_path), "--no-plots"), f"results #{i}")


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory):
    root = _trimmed_copy("0.5.23", tmp_path_factory.mktemp("tree") / "t")
    engine.apply(locate(root), aux_layers="2,30,58")
    return root, _files(root / "sglang")


@pytest.mark.parametrize("salt", range(3))
def test_fuzz_manifest(patched_tree, salt):
    root, snap = patched_tree
    man = root / "sglang" / mf.STATE_DIR / "manifest.json"
    for case in _cases(man, "json", 10 + salt):
        i, data = case.values
        _restore(root / "sglang", snap)
        man.write_bytes(data)
        for cmd in (["status"], ["revert"], ["apply", "--dry-run"]):
            check(cli("patch", *cmd, "--sglang-root", str(root)), f"manifest #{salt}.{i} {cmd}")


def test_compare_on_a_folder(tmp_path):
    check(cli("compare", str(tmp_path)), "compare on a folder")
    assert cli("compare", str(tmp_path)).returncode == 2


def test_tiny_out_under_a_file():
    r = cli("tiny", "--out", "/etc/passwd/x")
    check(r, "tiny --out /etc/passwd/x")
    assert r.returncode == 2


# ---------------------------------------------------------------- issue 23: in-process fuzz
# Every path of a valid value x every odd value, in process (fast): stream chunks and usage
# blocks through bench's chunk reader and a real HTTP stream, probe records through `profile`,
# YAML with anchors/aliases and depth through the one loader. The only outcomes allowed: a
# failed request with a reason, or one UserError line.

from hostile_http import Hostile, good_chunks, sse  # noqa: E402

from sglang_eagle3_ext import cli as cli_mod  # noqa: E402
from sglang_eagle3_ext.measure import chat_client  # noqa: E402
from sglang_eagle3_ext.measure.httpio import BadStream  # noqa: E402
from sglang_eagle3_ext.runtime.errors import UserError  # noqa: E402
from sglang_eagle3_ext.serve import releases as releases_mod  # noqa: E402

ODD_MORE = [*ODD, float("nan"), float("inf"), -1.5, 10**30, "[/]\x1b[31m", [[[]]], {"choices": []}]
_SGLEXT = {"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": 3, "spec_accept_length": 1.7}}}


def _every_path(doc):
    """(trail, key) of every value in a JSON tree, the root's children first."""
    out, stack = [], [([], doc)]
    while stack:
        trail, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((trail, k))
            stack.append((trail + [k], v))
    return out


def _with(doc, trail, key, value):
    doc = copy.deepcopy(doc)
    node = doc
    for t in trail:
        node = node[t]
    node[key] = value
    return doc


def _chunk_variants():
    seeds = [good_chunks(3)[1], good_chunks(3)[-2], good_chunks(3)[-1], _SGLEXT]
    out = [v for v in ODD_MORE]  # the chunk itself of the wrong shape
    for c in seeds:
        for trail, key in _every_path(c):
            out += [_with(c, trail, key, v) for v in ODD_MORE]
    return out


def test_fuzz_stream_chunks_and_usage_blocks():
    """Each variant chunk: folded into a request record, or BadStream (the request's reason)."""
    n = 0
    for chunk in _chunk_variants():
        rec = chat_client.RequestRecord(prompt_index=0)
        try:
            chat_client._take_chunk(chunk, rec, 0.01)
        except BadStream as exc:
            assert str(exc) and "\n" not in str(exc)
            n += 1
    assert n > 50  # most odd values are refused, not folded in


def test_fuzz_streams_over_http():
    """Variant chunks inside a real SSE stream: every request ends with no error or a reason."""
    rng = random.Random(SEED)
    variants = _chunk_variants()
    streams = []
    for _ in range(60):
        chunks = good_chunks(4)
        chunks.insert(rng.randrange(1, len(chunks) + 1), rng.choice(variants))
        streams.append(sse(chunks, done=rng.random() < 0.8))
    streams += [sse(good_chunks(4))[: rng.randrange(10, 200)] for _ in range(10)]  # cut anywhere
    served = iter(streams)

    def script(method, path, write, stop):
        write(next(served))

    with Hostile(script) as h:
        ep = chat_client.Endpoint(h.url, timeout_s=5.0)
        for i in range(len(streams)):
            rec = chat_client.stream_chat(ep, {"max_tokens": 4, "messages": []}, chat_client.RequestRecord(0))
            assert rec.error is None or ("a bug in" not in rec.error and "\n" not in rec.error), (i, rec.error)


_STEADY = REPO / "tests/data/profile/steady_issue15.jsonl"


def _probe_variants():
    recs = [json.loads(x) for x in _STEADY.read_text().splitlines() if x.strip()]
    rng = random.Random(SEED)
    base = recs[1]
    out = []
    for trail, key in _every_path(base):
        for v in rng.sample(ODD_MORE, 3):
            out.append(recs[:1] + [_with(base, trail, key, v)] + recs[2:])
    return out


def test_fuzz_probe_records_every_field(tmp_path, capsys):
    """Each field of a /2 record set to odd values: `profile --json --predict` reads it or says
    one line naming the line; never "a bug"."""
    f = tmp_path / "p.jsonl"
    variants = _probe_variants()
    assert len(variants) > 300
    for i, recs in enumerate(variants):
        f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        rc = cli_mod.main(["profile", str(f), "--json", "--predict", "--baseline-tps", "50"])
        c = capsys.readouterr()
        assert "a bug in" not in c.err and "Traceback" not in c.err, (i, c.err)
        if rc:
            assert f"{f}:2:" in c.err or "--predict" in c.err or "predict" in c.err, (i, c.err)


def _yaml_variants(rng):
    """Alias fans, chains and depths around the limits, in a preset's shape."""
    out = []
    for _ in range(30):
        width, levels = rng.randint(2, 12), rng.randint(1, 8)
        lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
        for i in range(1, levels):
            lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
        out.append("\n".join(lines) + "\n")
        depth = rng.randint(1, 200)
        flow = rng.random() < 0.5
        out.append(("k: " + "[" * depth + "]" * depth) if flow else
                   "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v\n")
        out.append("a: &a {b: *a}\n" if rng.random() < 0.5 else "x: *nothing\n")
    return out


def test_fuzz_yaml_anchors_and_depth(tmp_path):
    """Every variant through the preset and sweep readers: loads, or one UserError; always fast."""
    from sglang_eagle3_ext.serve import launch_config
    from sglang_eagle3_ext.tune import sweep

    f = tmp_path / "p.yaml"
    rng = random.Random(SEED)
    t0 = __import__("time").monotonic()
    for i, text in enumerate(_yaml_variants(rng)):
        f.write_text(text)
        for load in (launch_config.load_preset, sweep.load_spec):
            try:
                load(str(f))
            except UserError as exc:
                assert "\n" not in str(exc), (i, str(exc))
    assert __import__("time").monotonic() - t0 < 60  # a hang guard: an alias bomb would never finish


# ---------------------------------------------------------------- issue 34: every reader, one reader
# Seeded mutants of real documents through EVERY command that reads them (in process: fast), and
# the special files (a FIFO, /dev/zero behind a link, a folder, a 1 GiB sparse file) through the
# same commands in ONE memory-capped child with an alarm per call (a hang or an unbounded read
# fails the test, never the machine). Outcomes allowed: success, or exit 1/2 with one error line;
# never "a bug", never a traceback.

SCAN_DOC = REPO / "docs/data/h200-2026-12-02-r8/moe5/scan-moe/scan.json"
LADDER_DOC = REPO / "docs/data/h200-2026-12-01/8b-p08/p08/configs/eagle3-s5-k1-d6-no-nccl/ladder.json"
CONTROL_PROBES = REPO / "docs/data/h200-2026-12-02-r8/8bp/policy/configs/eagle3-s5-k1-d6-no-nccl/prof.jsonl"
HOLD_PROBES = REPO / "tests/data/profile/hold_v3.jsonl"
MUTANTS = 12   # per document and reader family (seeded)
BIG_INT = 10**400
ODD_34 = [*ODD, BIG_INT, -BIG_INT, float("nan"), float("inf"), [[[[[]]]]], {"1": {"2": "x"}}]


def _mutants(doc, salt: int, n: int = MUTANTS) -> list[bytes]:
    """Seeded structural mutants (_mutate_tree), one value swapped for an odd one per path
    sample (NaN, Infinity, 400-digit integers included), and truncations."""
    rng = random.Random(SEED * 34 + salt)
    out = [json.dumps(_mutate_tree(rng, doc)).encode() for _ in range(n)]
    paths = _every_path(doc)
    for trail, key in rng.sample(paths, min(n, len(paths))):
        out.append(json.dumps(_with(doc, trail, key, rng.choice(ODD_34))).encode())
    text = json.dumps(doc).encode()
    out += [text[: rng.randrange(1, len(text))] for _ in range(2)]
    return out


def _run_in_process(capsys, argv: list[str], what: str) -> None:
    rc = cli_mod.main(argv)
    c = capsys.readouterr()
    assert "a bug" not in c.err and "Traceback" not in c.err, (what, c.err[-2000:])
    if rc:
        errors = [x for x in c.err.splitlines() if x.startswith("error:")]
        assert rc in (1, 2, 130) and len(errors) == 1, (what, rc, c.err[-2000:])


def _readers(kind: str, f: Path, tmp: Path) -> list[list[str]]:
    """Every command that reads a document of ``kind`` at ``f`` (a scan: its folder)."""
    root = str(releases_mod.fetch("0.5.23"))
    if kind == "scan":
        return [["sweep", "--report", str(f.parent)], ["compare", str(f.parent), "--json"],
                ["adaptive", "write", "--from", str(f.parent), "--out", str(tmp / "a.json"), "--sglang-root", root],
                ["launch", "--sglang-root", root, "--model", str(tmp / "t"), "--draft", str(tmp / "d"),
                 "--policy", str(f), "--no-sglang-check", "--dry-run"]]
    if kind == "probes":
        return [["profile", str(f), "--json"], ["profile", str(f)]]
    if kind == "ladder":
        return [["compare", str(f), str(LADDER_DOC), "--json"],
                ["profile", str(HOLD_PROBES), "--bench", str(f), "--json"]]
    if kind == "sweep":
        return [["sweep", "--report", str(f.parent), "--no-plots"],
                ["adaptive", "write", "--from", str(f.parent), "--out", str(tmp / "a.json"), "--sglang-root", root],
                ["compare", str(f), "--json"]]
    if kind == "bench":
        return [["compare", str(f), str(BENCH), "--json"], ["profile", str(HOLD_PROBES), "--bench", str(f), "--json"]]
    if kind == "yaml":
        return [["launch", str(f), "--dry-run", "--no-sglang-check"], ["sweep", str(f), "--plan", "--out", str(tmp / "o")]]
    raise AssertionError(kind)


@pytest.fixture()
def reader_home(tmp_path, monkeypatch):
    from test_flags import write_model

    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    write_model(tmp_path / "t", "LlamaForCausalLM")
    write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    return tmp_path


def _jsonl_mutants(path: Path, salt: int) -> list[bytes]:
    lines = [json.loads(x) for x in path.read_text().splitlines()[:6] if x.strip()]
    rng = random.Random(SEED * 34 + salt)
    out = []
    for m in _mutants(lines[2], salt, n=MUTANTS // 2):
        try:
            rec = json.loads(m)
        except ValueError:
            rec = m.decode(errors="replace")
        body = [json.dumps(x) for x in lines]
        body[2] = rec if isinstance(rec, str) else json.dumps(rec)
        out.append(("\n".join(body) + "\n").encode())
    ctl = lines[2].get("control") or {}
    for trail, key in rng.sample(_every_path(ctl), min(MUTANTS, len(_every_path(ctl)))):
        rec = dict(lines[2], control=_with(ctl, trail, key, rng.choice(ODD_34)))
        out.append(("\n".join(json.dumps(x) for x in [*lines[:2], rec, *lines[3:]]) + "\n").encode())
    return out


def _sweep_dir_doc() -> dict:
    return json.loads(RESULTS.read_text())


@pytest.mark.parametrize("kind", ["scan", "probes", "ladder", "sweep", "bench", "yaml"])
def test_fuzz_34_every_reader_of_every_document(reader_home, capsys, kind):
    tmp = reader_home
    folder = tmp / "doc"
    folder.mkdir()
    name = {"scan": "scan.json", "probes": "p.jsonl", "ladder": "ladder.json", "sweep": "results.json",
            "bench": "bench.json", "yaml": "p.yaml"}[kind]
    f = folder / name
    if kind == "scan":
        variants = _mutants(json.loads(SCAN_DOC.read_text()), 1)
    elif kind == "probes":
        variants = _jsonl_mutants(CONTROL_PROBES, 2) + _jsonl_mutants(HOLD_PROBES, 3)
    elif kind == "ladder":
        variants = _mutants(json.loads(LADDER_DOC.read_text()), 4)
    elif kind == "sweep":
        variants = _mutants(_sweep_dir_doc(), 5)
    elif kind == "bench":
        variants = _mutants(_BENCH_DOC, 6)
    else:
        base = yaml.safe_load(PRESET.read_text())
        variants = [yaml.safe_dump(_mutate_tree(random.Random(SEED + i), base)).encode() for i in range(MUTANTS)]
        variants += [b"model: /m\ntp: " + b"9" * 5000 + b"\n", b"model: /m\nsteps: 1000000\ntopk: 1\n"
                     b"draft_tokens: 1000001\n", b"name: s\nmatrix: {steps: [" + b"9" * 400 + b"]}\n"]
    for i, data in enumerate(variants):
        f.write_bytes(data)
        for argv in _readers(kind, f, tmp):
            _run_in_process(capsys, argv, f"{kind} #{i} {argv[0]}")


SPECIAL_CHILD = r'''
import json, os, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import safeparse
safeparse.PIPE_WAIT_S = 0.3  # a FIFO nobody writes to (`profile` reads named pipes): refused sooner
cases = json.loads(sys.argv[1])
out = []
class Hung(BaseException):  # not an OSError: no handler of the CLI can take it for a read error
    pass
def hung(*_):
    raise Hung()
signal.signal(signal.SIGALRM, hung)
for what, argv in cases:
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)
    try:
        signal.alarm(8)
        try:
            rc = cli.main(argv)
        except Hung:
            rc = "hung"
        except MemoryError:
            rc = "memory"
        finally:
            signal.alarm(0)
    finally:
        os.dup2(saved, 2)
        os.close(w)
    err = os.read(r, 1 << 16).decode(errors="replace")
    os.close(r)
    out.append([what, rc, err])
print("RESULT " + json.dumps(out))
'''


def test_fuzz_34_special_files_through_every_reader(reader_home):
    """A FIFO, /dev/zero behind a link, a folder and a 1 GiB sparse file in place of each document,
    through every reader: refused before any read, one line, no hang, no unbounded read."""
    tmp = reader_home
    specials = {}
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    specials["fifo"] = fifo
    (tmp / "zero").symlink_to("/dev/zero")
    specials["zero"] = tmp / "zero"
    (tmp / "adir").mkdir()
    specials["folder"] = tmp / "adir"
    with open(tmp / "sparse", "wb") as fh:
        fh.truncate(1 << 30)
    specials["sparse"] = tmp / "sparse"
    cases = []
    names = {"scan": "scan.json", "probes": "p.jsonl", "ladder": "ladder.json", "sweep": "results.json",
             "bench": "bench.json", "yaml": "p.yaml"}
    for kind, name in names.items():
        for sname, target in specials.items():
            folder = tmp / f"{kind}-{sname}"
            folder.mkdir()
            (folder / name).symlink_to(target)
            for argv in _readers(kind, folder / name, tmp):
                cases.append([f"{kind}/{sname}/{argv[0]}", argv])
    env = dict(os.environ, SGLANG_EAGLE3_CACHE=str(tmp / "cache"))
    r = subprocess.run([sys.executable, "-c", SPECIAL_CHILD, json.dumps(cases)], capture_output=True, text=True,
                       timeout=300, env=env, stdin=subprocess.DEVNULL, cwd=tmp)
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    for what, rc, err in json.loads(lines[-1][len("RESULT "):]):
        assert rc not in ("hung", "memory"), (what, rc)
        assert "a bug" not in err and "Traceback" not in err, (what, err)
        errors = [x for x in err.splitlines() if x.startswith("error:")]
        assert rc in (1, 2) and len(errors) == 1, (what, rc, err)
