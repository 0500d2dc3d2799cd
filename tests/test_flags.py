"""Static launch-flag rules (flags.validate without SGLang's own check), per pinned release.

Every rule has a failing input (UserError, exit code 2, message checked) and a passing one.
Release rules run against the real unpacked sources of the pinned releases; model folders are
config.json-only (written here), which is all the rules read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import flags, release_flags, releases, sglang_check
from sglang_eagle3_ext.serve.server import LaunchConfig

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 512,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}


def write_model(folder: Path, arch: str, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(LLAMA, architectures=[arch], **extra)
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    empty = root / "no_config"
    empty.mkdir()
    return {
        "target": str(write_model(root / "target", "LlamaForCausalLM")),
        "eagle3": str(write_model(root / "eagle3", "LlamaForCausalLMEagle3", num_hidden_layers=1,
                                  draft_vocab_size=512)),
        "eagle": str(write_model(root / "eagle", "LlamaForCausalLMEagle", num_hidden_layers=1)),
        "ds_eagle3": str(write_model(root / "ds_eagle3", "Eagle3DeepseekV2ForCausalLM")),
        "deepseek": str(write_model(root / "deepseek", "DeepseekV3ForCausalLM")),
        "no_config": str(empty),
        "missing": str(root / "does_not_exist"),
    }


def env_of(version: str | None = None):
    return locate(releases.fetch(version) if version else None)


def cfg(models, **kw) -> LaunchConfig:
    base = dict(model=models["target"], draft=models["eagle3"], steps=2, topk=1, draft_tokens=3)
    base.update(kw)
    return LaunchConfig(**base)


def check(c: LaunchConfig, version: str | None = None, environ: dict | None = None) -> list[str]:
    return flags.validate(c, env_of(version), sglang_check=False, environ=environ or {})


def fails(c: LaunchConfig, *needles: str, version: str | None = None, environ: dict | None = None) -> str:
    with pytest.raises(UserError) as ei:
        check(c, version, environ)
    assert ei.value.exit_code == 2
    msg = str(ei.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


# ------------------------------------------------------------------ spec values

def test_spec_values_go_together(models):
    fails(cfg(models, topk=None, draft_tokens=None), "--steps given without --topk, --draft-tokens")
    fails(cfg(models, steps=None), "--topk, --draft-tokens given without --steps")
    check(cfg(models))


def test_spec_values_required_unless_adaptive(models):
    fails(cfg(models, steps=None, topk=None, draft_tokens=None), "give --steps, --topk and --draft-tokens")
    check(cfg(models, steps=None, topk=None, draft_tokens=None, extra_args=["--speculative-adaptive"]))


@pytest.mark.parametrize("steps,topk,ndt,needle", [
    (0, 1, 1, "--steps 0: must be >= 1"),
    (2, 0, 3, "--topk 0: must be >= 1"),
    (-1, 1, 0, "--steps -1"),
    (2, 4, 0, "--draft-tokens 0: must be >= 1"),
])
def test_steps_topk_positive(models, steps, topk, ndt, needle):
    fails(cfg(models, steps=steps, topk=topk, draft_tokens=ndt), needle)


def test_chain_needs_steps_plus_one(models):
    msg = fails(cfg(models, steps=2, draft_tokens=5), "use --draft-tokens 3 with --steps 2")
    assert "silently" in msg
    fails(cfg(models, steps=3, draft_tokens=2), "use --draft-tokens 4")
    check(cfg(models, steps=5, draft_tokens=6))


def test_tree_size_bound(models):
    fails(cfg(models, steps=2, topk=4, draft_tokens=64), "at most 9 tokens")
    check(cfg(models, steps=2, topk=4, draft_tokens=9))
    check(cfg(models, steps=5, topk=4, draft_tokens=8))


def test_no_spec_conflicts(models):
    fails(cfg(models, no_spec=True, draft=None), "--no-spec conflicts with --steps")
    check(LaunchConfig(model=models["target"], no_spec=True))


def test_algorithm_names(models):
    fails(cfg(models, algorithm="FOO"), "EAGLE or EAGLE3")
    assert flags.normalise_algorithm("nextn") == "EAGLE"
    assert flags.normalise_algorithm("eagle3") == "EAGLE3"


# ------------------------------------------------------------------ models

def test_model_paths(models):
    fails(cfg(models, model=models["missing"]), "--model", "no such folder")
    fails(cfg(models, model=models["no_config"]), "no config.json")
    fails(cfg(models, draft=models["missing"]), "--draft", "no such folder")
    check(cfg(models))


def test_eagle3_needs_draft(models):
    fails(cfg(models, draft=None), "EAGLE3 needs an EAGLE-3 draft model")


def test_eagle_without_draft_only_for_mtp_targets(models):
    fails(cfg(models, algorithm="EAGLE", draft=None), "built-in MTP layers", "LlamaForCausalLM")
    notes = check(cfg(models, algorithm="EAGLE", draft=None, model=models["deepseek"]))
    assert any("its own draft" in n for n in notes)


def test_algorithm_matches_draft_architecture(models):
    fails(cfg(models, draft=models["eagle"]), "needs an EAGLE-3 draft", "LlamaForCausalLMEagle",
          "use --algorithm EAGLE")
    fails(cfg(models, algorithm="EAGLE"), "is an EAGLE-3 draft", "use --algorithm EAGLE3")
    check(cfg(models, algorithm="EAGLE", draft=models["eagle"]))
    check(cfg(models, algorithm="NEXTN", draft=models["eagle"]))


def test_draft_architecture_exists_in_release(models):
    fails(cfg(models, draft=models["ds_eagle3"]), "Eagle3DeepseekV2ForCausalLM is not in SGLang 0.5.9",
          version="0.5.9")
    check(cfg(models, draft=models["ds_eagle3"]), version="0.5.12.post1")


# ------------------------------------------------------------------ release rules

@pytest.mark.parametrize("version,backend,ok", [
    ("0.5.23", "torch_native", False), ("0.5.23", "triton", True), ("0.5.23", "fa3", True),
    ("0.5.9", "triton", False), ("0.5.9", "fa3", True),
    ("0.5.3.post2", "fa3", False), ("0.5.3.post2", "flashinfer", True),
    ("0.4.10.post2", "torch_native", True),  # no check at all in 0.4.10-0.5.1
])
def test_topk_page_size_backend(models, version, backend, ok):
    c = cfg(models, steps=2, topk=4, draft_tokens=8,
            extra_args=["--page-size", "16", "--attention-backend", backend])
    if ok:
        check(c, version)
    else:
        fails(c, "--page-size 16 needs --attention-backend", version=version)
    check(cfg(models, extra_args=["--page-size", "16", "--attention-backend", backend]), version)  # topk 1


def test_trtllm_mha_needs_topk_1(models):
    fails(cfg(models, steps=2, topk=2, draft_tokens=4, extra_args=["--attention-backend", "trtllm_mha"]),
          "trtllm_mha attention backend only supports --topk 1")
    check(cfg(models, extra_args=["--attention-backend", "trtllm_mha"]))


def test_rejection_sampling_needs_topk_1(models):
    fails(cfg(models, steps=2, topk=2, draft_tokens=4, extra_args=["--speculative-use-rejection-sampling"]),
          "requires --topk 1")
    check(cfg(models, extra_args=["--speculative-use-rejection-sampling"]))


def test_spec_v2_topk_rules(models):
    tree = cfg(models, steps=2, topk=4, draft_tokens=8)
    fails(tree, "spec V2 of SGLang 0.5.9 supports only --topk 1", version="0.5.9",
          environ={"SGLANG_ENABLE_SPEC_V2": "1"})
    check(tree, "0.5.9")
    notes = check(tree, "0.5.12.post1")
    assert any("falls back to the spec V1 worker" in n for n in notes)
    notes = check(cfg(models), "0.5.16", environ={"SGLANG_ENABLE_SPEC_V2": "1"})
    assert any("no effect" in n for n in notes)


def test_flags_must_exist_in_release(models):
    fails(cfg(models, extra_args=["--speculative-adaptive"]), "SGLang 0.5.9 has no --speculative-adaptive",
          version="0.5.9")
    check(cfg(models, extra_args=["--speculative-adaptive"]), "0.5.12.post1")
    tiny_flags = ["--cuda-graph-max-bs-decode", "8", "--disable-prefill-cuda-graph"]
    fails(cfg(models, extra_args=tiny_flags), "--cuda-graph-max-bs-decode", version="0.5.13")
    check(cfg(models, extra_args=tiny_flags), "0.5.16")
    check(cfg(models, extra_args=tiny_flags), "0.5.23")
    fails(cfg(models, extra_args=["--no-such-flag"]), "has no --no-such-flag")


def test_known_flags_every_release(release_root):
    env = locate(release_root)
    known = release_flags.known_flags(env)
    for f in ("--model-path", "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
              "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--tp-size", "--host",
              "--port", "--page-size", "--attention-backend", "--nnodes", "--node-rank", "--dist-init-addr"):
        assert f in known, (env.version, f)
    # version map section 6: --speculative-adaptive first in 0.5.12 of the pinned set
    assert ("--speculative-adaptive" in known) == env.at_least("0.5.12"), env.version
    assert "LlamaForCausalLMEagle3" in release_flags.eagle3_archs(env)


def test_owned_flags_not_in_extra(models):
    fails(cfg(models, extra_args=["--speculative-num-steps", "3"]), "use the wrapper's --steps")
    fails(cfg(models, extra_args=["--tp", "2"]), "--tp")
    check(cfg(models, extra_args=["--mem-fraction-static", "0.8"]))


# ------------------------------------------------------------------ the rest

@pytest.mark.parametrize("kw,needle", [
    ({"tp": 0}, "--tp 0"),
    ({"port": 0}, "--port 0"),
    ({"timeout": 0}, "--timeout"),
    ({"profile": True, "profile_mode": "gpu"}, "--profile-mode gpu"),
    ({"profile": True, "profile_every": 0}, "--profile-every 0"),
    ({"profile_every": 10}, "need --profile"),
    ({"aux_layers": "-1,2"}, "emb"),
    ({"aux_layers": "2,x"}, "not a layer number"),
    ({"nnodes": 2}, "--dist-init-addr"),
    ({"model": None}, "no target model"),
])
def test_basic_settings(models, kw, needle):
    fails(cfg(models, **kw), needle)


def test_basic_settings_pass(models):
    notes = check(cfg(models, tp=8, profile=True, profile_mode="events", profile_every=50,
                      aux_layers="emb,1,2", nnodes=2, dist_init_addr="10.0.0.1:5000"))
    assert notes == []


def test_sglang_check_import_failure_is_an_environment_error(monkeypatch):
    """SGLang that cannot import (a broken env) is not "SGLang rejects these arguments"."""
    monkeypatch.setattr(sglang_check, "sglang_check_many", lambda argvs, **kw: [
        {"ok": False, "type": "ModuleNotFoundError", "message": "No module named 'torchvision'",
         "where": "sglang/srt/multimodal/internvl_utils.py:5"}])
    with pytest.raises(UserError) as ei:
        sglang_check.run_sglang_checks(["python", "-m", "sglang.launch_server", "--model-path", "m"])
    assert ei.value.exit_code == 1
    assert "could not import SGLang" in str(ei.value) and "--no-sglang-check" in str(ei.value)
    monkeypatch.setattr(sglang_check, "sglang_check_many", lambda argvs, **kw: [
        {"ok": False, "type": "AssertionError", "message": "", "where": "sglang/srt/x.py:9: assert y"}])
    with pytest.raises(UserError) as ei:
        sglang_check.run_sglang_checks(["python", "-m", "sglang.launch_server", "--model-path", "m"])
    assert ei.value.exit_code == 2 and "SGLang rejects these arguments" in str(ei.value)
