"""Launch presets (argv/env snapshots), YAML errors, CLI overrides, `--` splitting, dry run,
multi-node printing, and the CLI's "exit 2, nothing started" guarantee."""

from __future__ import annotations

import subprocess

import psutil
import pytest
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import server


@pytest.fixture()
def model_env(tmp_path, monkeypatch) -> dict[str, str]:
    """Preset path variables pointing at config-only model folders."""
    paths = {
        "KIMI_K25_PATH": write_model(tmp_path / "kimi", "KimiK25ForConditionalGeneration", num_hidden_layers=61),
        "KIMI_K25_EAGLE3_PATH": write_model(tmp_path / "kimi_eagle3", "LlamaForCausalLMEagle3"),
        "LLAMA31_8B_PATH": write_model(tmp_path / "llama", "LlamaForCausalLM"),
        "LLAMA31_8B_EAGLE3_PATH": write_model(tmp_path / "llama_eagle3", "LlamaForCausalLMEagle3"),
        "SGLANG_EAGLE3_TINY": tmp_path / "tiny",
        "SGLANG_EAGLE3_LLAMA3_8B": tmp_path / "l8",
        "SGLANG_EAGLE3_MOE": tmp_path / "moe",
    }
    write_model(tmp_path / "tiny" / "target", "LlamaForCausalLM")
    write_model(tmp_path / "tiny" / "draft", "LlamaForCausalLMEagle3")
    write_model(tmp_path / "l8" / "target", "LlamaForCausalLM")
    write_model(tmp_path / "l8" / "draft", "LlamaForCausalLMEagle3")
    write_model(tmp_path / "moe" / "target", "DeepseekV3ForCausalLM")
    write_model(tmp_path / "moe" / "draft", "LlamaForCausalLMEagle3")
    monkeypatch.delenv("SGLANG_EAGLE3_DRAFT", raising=False)
    for k, v in paths.items():
        monkeypatch.setenv(k, str(v))
    for k in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL"):
        monkeypatch.delenv(k, raising=False)
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture()
def no_popen(monkeypatch):
    """Fail the test if anything tries to start a process; also count live children."""
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError(f"a process was started: {a}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield calls
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert calls == [] and after <= before


KIMI_SPEC = ["--trust-remote-code"]
TINY_FLAGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
              "--mem-fraction-static", "0.3", "--max-running-requests", "8", "--cuda-graph-max-bs-decode", "8",
              "--disable-prefill-cuda-graph"]
NCCL_TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "SGLANG_EAGLE3_NCCL": "tuned"}


def expected(name: str, e: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    host = ["--host", "127.0.0.1", "--port", "30000"]
    kimi, kd = e["KIMI_K25_PATH"], e["KIMI_K25_EAGLE3_PATH"]
    tiny = e["SGLANG_EAGLE3_TINY"]
    spec = lambda d, s, k, n: ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", d,  # noqa: E731
                               "--speculative-num-steps", str(s), "--speculative-eagle-topk", str(k),
                               "--speculative-num-draft-tokens", str(n)]
    head = ["python", "-m", "sglang.launch_server", "--model-path"]
    aux = {"SGLANG_EAGLE3_AUX_LAYERS": "2,30,58"}
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return {
        "kimi-k25-eagle3": (head + [kimi] + spec(kd, 2, 1, 3) + ["--tp-size", "8"] + host + KIMI_SPEC,
                            {**NCCL_TUNED, **aux}),
        "kimi-k25-eagle3-5step": (head + [kimi] + spec(kd, 5, 1, 6) + ["--tp-size", "8"] + host + KIMI_SPEC,
                                  {**NCCL_TUNED, **aux}),
        "kimi-k25-nospec": (head + [kimi, "--tp-size", "8"] + host + KIMI_SPEC, dict(NCCL_TUNED)),
        "llama31-8b-eagle3": (head + [e["LLAMA31_8B_PATH"]] + spec(e["LLAMA31_8B_EAGLE3_PATH"], 5, 4, 8) + host, {}),
        "tiny": (head + [f"{tiny}/target"] + spec(f"{tiny}/draft", 2, 1, 3) + host + TINY_FLAGS, offline),
        "tiny-nospec": (head + [f"{tiny}/target"] + host + TINY_FLAGS, offline),
        "llama3-8b": (head + [f"{e['SGLANG_EAGLE3_LLAMA3_8B']}/target"]
                      + spec(f"{e['SGLANG_EAGLE3_LLAMA3_8B']}/draft", 3, 1, 4) + host + shape_flags("0.6"), offline),
        "moe": (head + [f"{e['SGLANG_EAGLE3_MOE']}/target"]
                + spec(f"{e['SGLANG_EAGLE3_MOE']}/draft", 3, 1, 4) + host + shape_flags("0.7"), offline),
    }[name]


def shape_flags(mem: str) -> list[str]:
    """The tiny flags with the real-size shapes' memory fraction (launch/llama3-8b.yaml, moe.yaml)."""
    flags = list(TINY_FLAGS)
    flags[flags.index("--mem-fraction-static") + 1] = mem
    return flags


PRESETS = ["kimi-k25-eagle3", "kimi-k25-eagle3-5step", "kimi-k25-nospec", "llama31-8b-eagle3", "tiny",
           "tiny-nospec", "llama3-8b", "moe"]


def test_every_preset_is_listed():
    assert sorted(server.list_presets()) == sorted(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_snapshot(name, model_env):
    cfg = server.load_preset(name)
    cfg.python = "python"
    argv, env = server.build_command(cfg, environ={})
    assert (argv, env) == expected(name, model_env)
    from sglang_eagle3_ext.runtime.sglang_env import locate
    from sglang_eagle3_ext.serve import flags

    flags.validate(cfg, locate(), sglang_check=False, environ={})  # every preset passes the rules


def test_kimi_winner_matches_the_seeds(model_env):
    cfg = server.load_preset("kimi-k25-eagle3")
    assert (cfg.tp, cfg.steps, cfg.topk, cfg.draft_tokens, cfg.nccl) == (8, 2, 1, 3, "tuned")


def test_profile_env(model_env, tmp_path):
    cfg = server.override(server.load_preset("kimi-k25-eagle3"), profile=True, profile_every=50,
                          profile_mode="events", profile_out=str(tmp_path / "p.jsonl"))
    _, env = server.build_command(cfg, environ={})
    assert env["EAGLE3_PROFILE"] == "1" and env["EAGLE3_PROFILE_EVERY"] == "50"
    assert env["EAGLE3_PROFILE_MODE"] == "events" and env["EAGLE3_PROFILE_SPEC"] == "2,1,3"
    assert env["EAGLE3_PROFILE_OUT"] == str(tmp_path / "p.jsonl")


def test_user_nccl_value_wins(model_env):
    _, env = server.build_command(server.load_preset("kimi-k25-nospec"), environ={"NCCL_PROTO": "Simple"})
    assert "NCCL_PROTO" not in env and env["NCCL_ALGO"] == "Ring"


# ------------------------------------------------------------------ YAML

@pytest.mark.parametrize("text,needle", [
    ("model: a: b\n", "line 1: malformed YAML (mapping values are not allowed here)"),
    ("steps: 2\nstepz: 3\n", "unknown key 'stepz'"),
    ("- a\n- b\n", "expected a mapping"),
    ("steps: two\n", "steps must be an integer"),
    ("profile: yes please\n", "profile must be true or false"),
    ("env: [A]\n", "env must be a mapping"),
    ("model: ${NO_SUCH_VAR_X}\n", "NO_SUCH_VAR_X"),
])
def test_bad_yaml(tmp_path, text, needle):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(UserError) as ei:
        server.load_preset(str(f))
    assert ei.value.exit_code == 2 and needle in str(ei.value)


def test_unknown_preset_name():
    with pytest.raises(UserError, match="unknown preset 'nope'; known: .*kimi-k25-eagle3"):
        server.load_preset("nope")


def test_yaml_accepts_dashes_and_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("MYM", raising=False)
    f = tmp_path / "p.yaml"
    f.write_text("model: ${MYM:-/x/y}\ndraft-tokens: 3\naux_layers: [2, 30]\nextra_args: --a b\n")
    cfg = server.load_preset(str(f))
    assert (cfg.model, cfg.draft_tokens, cfg.aux_layers, cfg.extra_args, cfg.name) == \
        ("/x/y", 3, "2,30", ["--a", "b"], "p")


# ------------------------------------------------------------------ CLI

def run_cli(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_overrides_preset_and_splits_extra(model_env, capsys, no_popen):
    rc, out, _ = run_cli(["launch", "--port", "31000", "kimi-k25-eagle3", "--steps", "3", "--draft-tokens", "4",
                          "--no-sglang-check", "--dry-run", "--", "--mem-fraction-static", "0.8"], capsys)
    assert rc == 0
    assert "--speculative-num-steps 3" in out and "--speculative-num-draft-tokens 4" in out
    assert "--port 31000" in out and out.rstrip().endswith("--mem-fraction-static 0.8")
    assert "NCCL_PROTO=LL" in out and "SGLANG_EAGLE3_NCCL=tuned" in out


def test_cli_no_spec_over_spec_preset(model_env, capsys, no_popen):
    rc, out, _ = run_cli(["launch", "kimi-k25-eagle3", "--no-spec", "--no-sglang-check", "--dry-run"], capsys)
    assert rc == 0 and "speculative" not in out


def test_cli_multi_node_prints_every_node(model_env, capsys, no_popen):
    rc, out, _ = run_cli(["launch", "kimi-k25-eagle3", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000",
                          "--no-sglang-check"], capsys)
    assert rc == 0 and "# node 0" in out and "# node 1" in out
    assert "--node-rank 0" in out and "--node-rank 1" in out
    assert out.count("NCCL_PROTO=LL") == 2 and "nothing was started" in out


@pytest.mark.parametrize("argv,needle", [
    (["--model", "{t}", "--draft", "{d}", "--steps", "2", "--topk", "1", "--draft-tokens", "5"],
     "use --draft-tokens 3"),
    (["--model", "{t}", "--draft", "{d}", "--steps", "2"], "given without"),
    (["--model", "{t}", "--draft", "{d}", "--steps", "0", "--topk", "1", "--draft-tokens", "1"], "--steps 0"),
    (["--model", "{t}", "--draft", "{d}", "--steps", "2", "--topk", "4", "--draft-tokens", "64"], "at most 9"),
    (["--model", "{t}", "--steps", "2", "--topk", "1", "--draft-tokens", "3"], "needs an EAGLE-3 draft model"),
    (["--model", "{t}", "--draft", "{d}", "--algorithm", "EAGLE", "--steps", "2", "--topk", "1",
      "--draft-tokens", "3"], "use --algorithm EAGLE3"),
    (["--model", "{t}/nope", "--no-spec"], "no such folder"),
    (["--model", "{t}", "--nccl", "fast", "--no-spec"], "unknown NCCL preset"),
    (["--model", "{t}", "--no-spec", "--", "--speculative-num-steps", "3"], "use the wrapper's --steps"),
    (["tiny", "--", "--no-such-flag"], "has no --no-such-flag"),
])
def test_cli_invalid_exit_2_nothing_started(model_env, capsys, no_popen, argv, needle):
    t, d = f"{model_env['SGLANG_EAGLE3_TINY']}/target", f"{model_env['SGLANG_EAGLE3_TINY']}/draft"
    argv = [a.format(t=t, d=d) for a in argv]
    rc, out, err = run_cli(["launch", *argv, "--no-sglang-check"] if "--" not in argv else
                           ["launch", "--no-sglang-check", *argv], capsys)
    assert rc == 2, err
    assert needle in err and out == ""


def test_cli_valid_dry_run_passes(model_env, capsys, no_popen):
    t, d = f"{model_env['SGLANG_EAGLE3_TINY']}/target", f"{model_env['SGLANG_EAGLE3_TINY']}/draft"
    rc, out, err = run_cli(["launch", "--model", t, "--draft", d, "--steps", "2", "--topk", "1",
                            "--draft-tokens", "3", "--no-sglang-check", "--dry-run"], capsys)
    assert rc == 0, err and "dry run, nothing started" in out


def test_stop_without_servers(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path))
    rc, out, _ = run_cli(["stop"], capsys)
    assert rc == 0 and "no detached servers" in out
    rc, _, err = run_cli(["stop", "--pid-file", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and "not found" in err
