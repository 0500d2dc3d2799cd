"""`adaptive write` and `launch --adaptive`, against the real adaptive loaders of the pinned releases.

How the writer's output is validated: ``adaptive.release_loader`` reads
``sglang/srt/speculative/adaptive_spec_params.py`` of each pinned release (0.5.12.post1, 0.5.13,
0.5.16, 0.5.19, 0.5.23, unpacked by ``releases.fetch``), takes the release's own loader out of
the source with ``ast`` (``_load_adaptive_config`` from 0.5.13; ``load_adaptive_config`` plus the
``AdaptiveSpeculativeParams`` constructor in 0.5.12.post1) and executes that code unchanged, with
only ``json`` and a no-op ``log_info_on_rank0`` in its namespace (the module itself imports
SGLang internals at top level, so it cannot be imported from a bare source tree). For 0.5.23 the
test also imports the real, installed module and routes batch sizes through its
``AdaptiveSpeculativeParams``. Launch tests use ``--sglang-root`` on each pinned tree, dry run.
"""

from __future__ import annotations

import json

import pytest
from conftest import requires_sglang, subprocess_env
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import releases
from sglang_eagle3_ext.tune import adaptive

ADAPTIVE_RELEASES = ("0.5.12.post1", "0.5.13", "0.5.16", "0.5.19", "0.5.23")
# The 8B-shape figures (per-stream tok/s): speculation stops paying at 64 streams.
TABLE = {1: {0: 400.0, 1: 800.0, 3: 1228.0, 7: 1235.0},
         8: {0: 300.0, 1: 520.0, 3: 588.0, 7: 560.0},
         32: {0: 147.6, 1: 250.0, 3: 268.6, 7: 197.0},
         64: {0: 147.5, 1: 120.0, 3: 141.0}}


def _pkg(v: str):
    return releases.fetch(v) / "sglang"


def test_choose_within_percent_and_zero():
    ch = {c.batch_size: c for c in adaptive.choose(TABLE, 5.0)}
    assert ch[1].candidates == [3, 7] and ch[1].best_steps == 7
    assert ch[8].candidates == [3, 7]                   # 560 >= 588 x 0.95
    assert ch[32].candidates == [3]
    assert ch[64].candidates == [0, 3] and ch[64].best_steps == 0
    ch0 = {c.batch_size: c for c in adaptive.choose(TABLE, 0.0)}
    assert ch0[64].candidates == [0]
    # a release that cannot switch speculation off per tier keeps the best positive step, and says so
    nz = {c.batch_size: c for c in adaptive.choose(TABLE, 0.0, allows_zero=False)}
    assert nz[64].candidates == [3] and "cannot switch" in nz[64].note
    with pytest.raises(UserError):
        adaptive.choose(TABLE, 100.0)


@pytest.mark.parametrize("version", ADAPTIVE_RELEASES)
def test_written_config_loads_with_the_release_loader(version, tmp_path):
    loader = adaptive.release_loader(_pkg(version))
    assert loader.format == ("flat" if version == "0.5.12.post1" else "tiers")
    assert loader.allows_zero == (version not in ("0.5.12.post1", "0.5.13"))
    out = tmp_path / "adaptive.json"
    choices, cfg, read = adaptive.write(TABLE, out, loader, 5.0)
    assert json.loads(out.read_text()) == cfg
    if loader.format == "tiers":
        assert sorted(read) == [1, 8, 32, 64]
        assert read[1] == [3, 7] and read[32] == [3]
        assert read[64] == ([0, 3] if loader.allows_zero else [3])
    else:
        assert cfg == {"candidate_steps": [3, 7]} and read == {1: [3, 7]}
    assert adaptive.launch_steps(read) == 7
    # the same loader refuses what the release refuses (so the check can fail)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [-1]}} if loader.format == "tiers"
                              else {"candidate_steps": [3]}))
    with pytest.raises((ValueError, AssertionError)):
        loader.load(bad)


def test_flat_release_needs_two_steps(tmp_path):
    loader = adaptive.release_loader(_pkg("0.5.12.post1"))
    with pytest.raises(UserError, match="static --steps"):
        adaptive.write({1: {0: 10.0, 3: 100.0}}, tmp_path / "a.json", loader, 1.0)


def test_no_adaptive_before_0_5_12():
    with pytest.raises(UserError, match="0.5.12 or later"):
        adaptive.release_loader(_pkg("0.5.9"))


@requires_sglang
def test_installed_0_5_23_routes_batches_through_written_tiers(tmp_path):
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    out = tmp_path / "adaptive.json"
    _, _, read = adaptive.write(TABLE, out, adaptive.release_loader(_pkg("0.5.23")), 5.0)
    p = AdaptiveSpeculativeParams(initial_steps=adaptive.launch_steps(read), cfg_path=str(out))
    assert p.candidate_steps == [0, 3, 7]
    assert p.get_steps_for_batch(1) == 7       # tier 1 starts at the start step
    assert p.get_steps_for_batch(20) == 7      # tier 8 [3, 7]: starts at the start step too
    assert p.get_steps_for_batch(40) == 3      # tier 32: only 3
    assert p.get_steps_for_batch(100) in (0, 3)


def _sweep_doc() -> dict:
    def lv(c, v):
        return {"concurrency": c, "summary": {"per_stream_tok_s": v}}

    def cfg(steps, vals, baseline=False):
        return {"name": f"s{steps}", "status": "ok", "baseline": baseline, "steps": None if baseline else steps,
                "topk": None if baseline else 1, "bench": {"params": {"concurrency": 1},
                                                             "summary": {"decode_tok_s": {"avg": vals[0]}}},
                "ladder": {"levels": [lv(c, v) for c, v in zip((1, 8, 32, 64), vals, strict=True)]}}

    return {"schema": "eagle3_sweep/1", "configs": [
        cfg(0, [400.0, 300.0, 147.6, 147.5], baseline=True), cfg(1, [800.0, 520.0, 250.0, 120.0]),
        cfg(3, [1228.0, 588.0, 268.6, 141.0]),
        {"name": "s7 failed", "status": "failed", "baseline": False, "steps": 7, "topk": 1, "bench": None}]}


def test_table_from_sweep_and_cli(tmp_path, capsys):
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(_sweep_doc()))
    table, source, _ = adaptive.load_measurements(d)
    assert table[32] == {0: 147.6, 1: 250.0, 3: 268.6} and source[(1, 3)] == "measured"
    out = tmp_path / "a.json"
    rc = cli.main(["adaptive", "write", "--from", str(d), "--out", str(out), "--within", "5",
                   "--sglang-root", str(releases.fetch("0.5.16"))])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert json.loads(out.read_text()) == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [3]},
                                           "32": {"candidate_steps": [3]}, "64": {"candidate_steps": [0, 3]}}
    assert "own loader" in text and "--adaptive" in text
    # bad inputs: one line, exit 2
    assert cli.main(["adaptive", "write", "--from", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert cli.main(["adaptive", "write", "--from", str(d), "--out", str(tmp_path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------ launch --adaptive


@pytest.fixture()
def models(tmp_path):
    t = write_model(tmp_path / "t", "LlamaForCausalLM")
    d = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    cfgf = tmp_path / "adaptive.json"
    cfgf.write_text(json.dumps({"1": {"candidate_steps": [1, 3, 7]}, "8": {"candidate_steps": [0, 1, 3]},
                                "32": {"candidate_steps": [0, 1]}, "64": {"candidate_steps": [0]}}))
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"candidate_steps": [1, 3, 7]}))
    return {"t": str(t), "d": str(d), "cfg": str(cfgf), "flat": str(flat)}


def _launch(models, version, *more, cfg="cfg"):
    return cli.main(["launch", "--sglang-root", str(releases.fetch(version)), "--model", models["t"],
                     "--draft", models["d"], "--adaptive", models[cfg], "--no-sglang-check", "--dry-run",
                     *more])


@pytest.mark.parametrize("version", ["0.5.16", "0.5.19", "0.5.23"])
def test_launch_adaptive_sets_largest_candidate(version, models, capsys):
    rc = _launch(models, version)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = cap.out
    assert "--speculative-adaptive \\" in out or "--speculative-adaptive\n" in out
    assert f"--speculative-adaptive-config {models['cfg']}" in out
    assert "--speculative-num-steps 7" in out and "--speculative-num-draft-tokens 8" in out
    assert "--speculative-eagle-topk 1" in out
    assert "set --steps 7 --topk 1 --draft-tokens 8" in cap.err and "0.5.16 crashes" in cap.err


def test_launch_adaptive_flat_release(models, capsys):
    assert _launch(models, "0.5.12.post1", cfg="flat") == 0
    assert "--speculative-num-steps 7" in capsys.readouterr().out
    # a tiered file on 0.5.12.post1: its loader would read it without complaint and ignore the
    # tiers (default candidates), so the wrapper refuses it
    assert _launch(models, "0.5.12.post1") == 2
    assert "would ignore them" in capsys.readouterr().err
    # and a flat file on 0.5.13+: the release's own loader refuses it (no batch-size key)
    assert _launch(models, "0.5.23", cfg="flat") == 2
    assert "integer-string" in capsys.readouterr().err


def test_bare_speculative_adaptive_on_0_5_16(models, capsys):
    """`-- --speculative-adaptive` uses the release's default tiers (1: [1,3,7] ... on 0.5.16)."""
    root = str(releases.fetch("0.5.16"))
    base = ["launch", "--sglang-root", root, "--model", models["t"], "--draft", models["d"],
            "--no-sglang-check", "--dry-run"]
    assert cli.main([*base, "--", "--speculative-adaptive"]) == 0
    cap = capsys.readouterr()
    assert "--speculative-num-steps 7" in cap.out and "default tiers" in cap.err
    assert cli.main([*base, "--steps", "3", "--topk", "1", "--draft-tokens", "4", "--",
                     "--speculative-adaptive"]) == 2
    assert "crashes at start" in capsys.readouterr().err
    # other releases: SGLang's own choice stands (no steps added)
    root23 = str(releases.fetch("0.5.23"))
    assert cli.main(["launch", "--sglang-root", root23, "--model", models["t"], "--draft", models["d"],
                     "--no-sglang-check", "--dry-run", "--", "--speculative-adaptive"]) == 0
    assert "--speculative-num-steps" not in capsys.readouterr().out


@pytest.mark.parametrize("version,more,needle", [
    ("0.5.9", [], "needs SGLang 0.5.12 or later"),
    ("0.5.23", ["--steps", "3", "--topk", "2", "--draft-tokens", "4"], "topk 1 only"),
    ("0.5.23", ["--", "--enable-dp-attention"], "attention DP"),
    ("0.5.16", ["--steps", "3"], "crashes at start"),
    ("0.5.23", ["--steps", "5"], "not a candidate"),
    ("0.5.13", [], "own loader refuses"),             # 0.5.13 wants positive candidates
    ("0.5.23", ["--", "--speculative-adaptive"], "give --adaptive alone"),
])
def test_launch_adaptive_refusals(version, more, needle, models, capsys):
    rc = _launch(models, version, *more)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert "Traceback" not in err


def test_launch_adaptive_no_spec_and_missing_file(models, capsys, tmp_path):
    assert cli.main(["launch", "--sglang-root", str(releases.fetch("0.5.23")), "--model", models["t"],
                     "--no-spec", "--adaptive", models["cfg"], "--no-sglang-check", "--dry-run"]) == 2
    models = dict(models, cfg=str(tmp_path / "none.json"))
    assert _launch(models, "0.5.23") == 2
    err = capsys.readouterr().err
    assert "--no-spec" in err and "no such file" in err


def test_adaptive_over_a_static_preset(models, tmp_path, capsys):
    """--adaptive on a preset with steps 5 / topk 4: the preset's static values give way."""
    preset = tmp_path / "static.yaml"
    preset.write_text(f"model: {models['t']}\ndraft: {models['d']}\nsteps: 5\ntopk: 4\ndraft_tokens: 8\n")
    rc = cli.main(["launch", "--sglang-root", str(releases.fetch("0.5.23")), str(preset), "--adaptive",
                   models["cfg"], "--no-sglang-check", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "--speculative-eagle-topk 1" in out and "--speculative-num-steps 7" in out


def test_preset_key_adaptive(models, tmp_path, capsys):
    preset = tmp_path / "p.yaml"
    preset.write_text(f"model: {models['t']}\ndraft: {models['d']}\nadaptive: {models['cfg']}\n")
    rc = cli.main(["launch", "--sglang-root", str(releases.fetch("0.5.23")), str(preset),
                   "--no-sglang-check", "--dry-run"])
    assert rc == 0 and "--speculative-adaptive-config" in capsys.readouterr().out


@requires_sglang
@pytest.mark.sglang
def test_sglang_0_5_23_own_checks_accept_what_launch_builds(models):
    """SGLang 0.5.23's own prepare_server_args + resolution (one child Python, CPU: --device cuda
    added by the checker) on the argv `launch --adaptive` builds, and on one it would refuse."""
    from sglang_eagle3_ext.runtime.sglang_env import locate
    from sglang_eagle3_ext.serve import flags, server, sglang_check

    env = locate()
    cfg = server.LaunchConfig(model=models["t"], draft=models["d"], adaptive=models["cfg"], tp=8)
    flags.apply_adaptive(cfg, env, {})
    good = server.build_command(cfg, environ={})[0]
    bad = list(good)
    bad[bad.index("--speculative-num-steps") + 1] = "5"
    bad[bad.index("--speculative-num-draft-tokens") + 1] = "6"
    ok, refused = sglang_check.sglang_check_many([good, bad], env=subprocess_env())
    assert ok["ok"], ok
    assert ok["resolved"]["speculative_num_steps"] == 7 and ok["resolved"]["speculative_num_draft_tokens"] == 8
    assert not refused["ok"] and "not in the adaptive config candidate_steps" in refused["message"]


@pytest.mark.parametrize("version", releases.PINNED)
def test_hold_support_per_release(version):
    """adaptive_format.hold_support on the real trees: 0.5.13+ hold (step 0 from 0.5.16, asked of
    the release's own loader); 0.5.12.post1 and older refuse with the reason and point at sweep."""
    from sglang_eagle3_ext.runtime.sglang_env import locate, parse_version
    from sglang_eagle3_ext.serve import adaptive_format

    env = locate(str(releases.fetch(version)))
    v = parse_version(version)
    if v < (0, 5, 13):
        with pytest.raises(UserError) as e:
            adaptive_format.hold_support(env)
        assert e.value.exit_code == 2 and "sweep" in str(e.value)
        return
    loader, note = adaptive_format.hold_support(env)
    assert loader.format == "tiers"
    assert loader.allows_zero is (v >= (0, 5, 16)) and (note is None) is (v >= (0, 5, 16))
    one = adaptive_format.one_tier([3, 1, 2] + ([0] if loader.allows_zero else []))
    assert adaptive_format.launch_steps({int(k): t["candidate_steps"] for k, t in one.items()}) == 3
    assert adaptive_format.start_below_largest_crashes(v) is (v[:3] == (0, 5, 16))
