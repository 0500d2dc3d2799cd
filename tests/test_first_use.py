"""Mistakes a first user makes, each answered with what to do: a preset path that names the
variable to set, a scan dry run that leaves nothing behind, a bench result given to `profile`.

Everything runs through the real CLI (in process) on committed samples: model configs without
weights in tests/data/layers, the H200 sweep in docs/data.
"""

from __future__ import annotations

from pathlib import Path

from conftest import REPO
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.serve import releases

LAYERS = REPO / "tests" / "data" / "layers"
PRESET = REPO / "launch" / "kimi-k25-eagle3.yaml"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    c = capsys.readouterr()
    return rc, c.out, c.err


def test_a_preset_path_error_names_the_variable(monkeypatch, capsys):
    """`launch launch/kimi-k25-eagle3.yaml --dry-run` without KIMI_K25_PATH said only "--model
    /models/Kimi-K2.5: no such folder": the folder is the preset's default, and the variable that
    changes it was named nowhere."""
    monkeypatch.delenv("KIMI_K25_PATH", raising=False)
    monkeypatch.delenv("KIMI_K25_EAGLE3_PATH", raising=False)
    rc, _, err = _run(capsys, "launch", PRESET, "--dry-run")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--model /models/Kimi-K2.5: no such folder" in err
    assert "used because KIMI_K25_PATH is not set: export KIMI_K25_PATH=" in err and "or give --model PATH" in err
    # set, but to a wrong folder: the variable is still the one to fix
    monkeypatch.setenv("KIMI_K25_PATH", "/nonexistent/kimi")
    rc, _, err = _run(capsys, "launch", PRESET, "--dry-run")
    assert rc == 2 and "it comes from $KIMI_K25_PATH" in err, err
    # the target found: the draft's variable is named
    monkeypatch.setenv("KIMI_K25_PATH", str(LAYERS / "kimi_k25_target"))
    rc, _, err = _run(capsys, "launch", PRESET, "--dry-run")
    assert rc == 2 and "--draft /models/Kimi-K2.5-eagle3" in err and "KIMI_K25_EAGLE3_PATH is not set" in err, err
    # a path typed on the command line names no variable
    rc, _, err = _run(capsys, "launch", PRESET, "--model", "/nonexistent/typed", "--dry-run")
    assert rc == 2 and "/nonexistent/typed: no such folder" in err and "KIMI" not in err, err


def _scan(models: dict[str, str], out: Path, *more: str) -> list[str]:
    return ["scan", "--sglang-root", str(releases.fetch("0.5.16")), "--model", models["target"],
            "--draft", models["draft"], "--steps", "1-3", "--concurrency", "1", "--no-sglang-check",
            "--out", str(out), *more]


def test_a_scan_dry_run_creates_nothing(tmp_path, capsys):
    """`scan --dry-run` made its scan-*/ folder and wrote the one-tier config there, also when it
    then refused (here: a draft folder without config.json). A dry run and a refusal leave the
    disk as they found it; the dry run still names the file the server would read."""
    models = {"target": str(write_model(tmp_path / "m" / "target", "LlamaForCausalLM")),
              "draft": str(write_model(tmp_path / "m" / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1))}
    before = sorted(tmp_path.rglob("*"))
    out = tmp_path / "runs" / "scan-x"
    rc, stdout, err = _run(capsys, *_scan(models, out, "--dry-run"))
    assert rc == 0, err
    assert f"for {out / 'sglang-adaptive-scan.json'}, read by the release's loader; dry run: not written" in stdout
    assert f"--speculative-adaptive-config {out.absolute() / 'sglang-adaptive-scan.json'}" in stdout
    assert sorted(tmp_path.rglob("*")) == before
    (tmp_path / "m" / "draft" / "config.json").unlink()
    before = sorted(tmp_path.rglob("*"))
    for more in ((), ("--dry-run",)):
        rc, _, err = _run(capsys, *_scan(models, out, *more))
        assert rc == 2 and "no config.json inside" in err, err
        assert sorted(tmp_path.rglob("*")) == before, more


H200 = REPO / "docs" / "data" / "h200-2026-11-29" / "run2" / "core"


def test_profile_names_a_document_of_ours(capsys):
    """`profile bench.json` said "bench.json:1: not valid JSON" of a valid file (the reader parsed
    it as JSONL, line by line). It now says what the file is and what profile reads."""
    bench = H200 / "configs" / "no-spec-no-nccl" / "bench.json"
    for f, what in ((bench, "this is a bench result (sgl-eagle3 bench); profile reads probe files (prof.jsonl"),
                    (H200 / "results.json", "this is a sweep's results.json (sgl-eagle3 sweep)"),
                    (LAYERS / "kimi_k25_target" / "config.json", "this is a model's config.json"),
                    (next((REPO / "docs" / "data").rglob("scan.json")), "this is a scan's scan.json")):
        rc, out, err = _run(capsys, "profile", f)
        lines = err.strip().splitlines()
        assert rc == 2 and out == "" and len(lines) == 1 and what in lines[0], (f, err)
        assert "not valid JSON" not in err
    rc, _, err = _run(capsys, "profile", bench)
    assert f"profile prof.jsonl --bench {bench}" in err



def test_a_one_record_probe_file_is_still_probes(tmp_path, capsys):
    """One probe record is one whole JSON document too: it is read, not named as another kind."""
    one = tmp_path / "prof.jsonl"
    one.write_text((H200 / "configs" / "eagle3-s4-k1-d5-no-nccl" / "prof.jsonl").read_text().splitlines()[0] + "\n")
    rc, out, err = _run(capsys, "profile", one, "--all-windows")
    assert rc == 0 and "TOTAL cycle" in out, err


def test_profile_and_compare_say_what_their_speeds_are_made_of(capsys, monkeypatch):
    """The README tour's profile and compare give 790.0 and 839.3 tok/s for one config (4 steps,
    no NCCL), and nothing said why. Each now says which clock its figure is from: profile the
    server's own cycle timings, compare the client's per-request first-to-last-token time."""
    monkeypatch.setenv("COLUMNS", "400")  # one line each: the test reads whole sentences
    cfgs = H200 / "configs"
    rc, out, err = _run(capsys, "profile", cfgs / "eagle3-s4-k1-d5-no-nccl" / "prof.jsonl", "--baseline-tps", "847.8")
    assert rc == 0 and "790.0" in out, err
    assert "eff tok/s = accept len x 1000 / TOTAL cycle: the server's own timing of the cycles" in out
    assert "bench and compare give the client's decode tok/s" in out and "--bench BENCH.json" in out
    rc, out, err = _run(capsys, "compare", cfgs / "no-spec-no-nccl" / "bench.json",
                        cfgs / "eagle3-s4-k1-d5-no-nccl" / "bench.json")
    assert rc == 0 and "839.3" in out, err
    assert "tok/s = decode tok/s per stream, the client's: per request, tokens after the first / time from " \
           "the first token to the last (TTFT left out)" in out
    assert "profile's eff tok/s is the server's own cycle timing instead" in out
    rc, out, _ = _run(capsys, "compare", "--metric", "e2e_tok_s", cfgs / "no-spec-no-nccl" / "bench.json")
    assert rc == 0 and "(TTFT included)" in out


def test_compare_names_a_probe_file(tmp_path, capsys):
    """`compare prof.jsonl` said "not JSON (Extra data: line 2 column 1)"; a one-record file passed
    that and got "neither a bench result nor a sweep result". Both now say it is a probe file."""
    probes = REPO / "tests" / "data" / "profile" / "synthetic_k5.jsonl"
    one = tmp_path / "one.jsonl"
    one.write_text(probes.read_text().splitlines()[0] + "\n")
    for f in (probes, one):
        rc, out, err = _run(capsys, "compare", f)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "this is a probe file" in err and f"sgl-eagle3 profile {f}" in err and "not JSON" not in err
    rc, _, err = _run(capsys, "compare", LAYERS / "kimi_k25_target" / "config.json")
    assert rc == 2 and "this is a model's config.json; compare reads bench results" in err, err
