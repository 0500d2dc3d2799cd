"""`tiny --shape llama3-8b|moe`, acceptance lists and the wiring construction, at reduced dimensions.

Every shape is built through the same code as at its real size (the CLI's shape overrides), on the
CPU. Targets are checked with the real transformers forward (LlamaForCausalLM,
DeepseekV3ForCausalLM); drafts with the plain-torch EAGLE-3 emulator of tests/test_tiny.py fed
with the target's real hidden states, and loaded into the real SGLang 0.5.23 llama_eagle3 module.
Real-size builds need a GPU: here only their CPU refusal is checked.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli, tiny
from sglang_eagle3_ext.tiny.store import load_all

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import REPO, requires_sglang, subprocess_env  # noqa: E402
from test_tiny import LOAD_SCRIPT, DraftEmulator  # noqa: E402

LLAMA_SMALL = ["--shape", "llama3-8b", "--layers", "8", "--hidden", "256", "--heads", "8",
               "--kv-heads", "2", "--head-dim", "64", "--intermediate", "256", "--vocab", "8192",
               "--draft-vocab", "1536"]
MOE_SMALL = ["--shape", "moe", "--layers", "8", "--hidden", "256", "--heads", "4",
             "--intermediate", "256", "--vocab", "4096", "--draft-vocab", "1024", "--experts", "4",
             "--active-experts", "2", "--moe-intermediate", "64", "--set", "q_lora_rank=64",
             "--set", "kv_lora_rank=32", "--set", "qk_nope_head_dim=32", "--set",
             "qk_rope_head_dim=16", "--set", "v_head_dim=32", "--set", "draft_head_dim=64"]
PS = (0.6, 0.9)
TRAINED = [1, 3, 5]


def _build(out: Path, *args: str) -> dict:
    assert cli.main(["tiny", "--out", str(out), "--device", "cpu", *args]) == 0
    return json.loads((out / "tiny.json").read_text())


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("llama") / "m"
    _build(root, *LLAMA_SMALL, "--acceptance", ",".join(map(str, PS)))
    return root


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("moe") / "m"
    _build(root, *MOE_SMALL, "--acceptance", "0.7")
    return root


@pytest.fixture(scope="module", params=["llama", "moe"])
def wired(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wired") / request.param
    base = LLAMA_SMALL if request.param == "llama" else MOE_SMALL
    _build(root, *base, "--acceptance", "0.8", "--trained-on", ",".join(map(str, TRAINED)))
    return root


def _model(folder: Path):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                       output_loading_info=True)
    assert not any(info.values()), info  # every checkpoint tensor used, nothing missing
    return model.eval()


def _contexts(n: int, seed: int, length: int = 20) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(tiny.VOCAB) for _ in range(length)] for _ in range(n)]


def _greedy(folder: Path, ctx: list[list[int]]):
    with torch.no_grad():
        logits = _model(folder)(torch.tensor(ctx)).logits[:, -1]
    return logits


# ----------------------------------------------------------------------------- targets (HF forward)


@pytest.mark.parametrize("which", ["llama", "moe"])
def test_partial_target_is_f_of_last_token(which, llama, moe):
    root = llama if which == "llama" else moe
    maps = json.loads((root / "maps.json").read_text())
    ctx = _contexts(24, seed=3)
    logits = _greedy(root / "target", ctx)
    assert logits.argmax(-1).tolist() == [maps["f"][c[-1]] for c in ctx]
    assert bool((logits.max(-1).values > 0).all())  # beats every zero row >= 2048
    w = load_all(root / "target")["lm_head.weight"]
    assert not w[tiny.VOCAB:].any()


def test_llama_shape_files(llama):
    info = json.loads((llama / "tiny.json").read_text())
    cfg = json.loads((llama / "target" / "config.json").read_text())
    assert cfg["num_key_value_heads"] == 2 and cfg["rope_theta"] == 500000.0
    assert cfg["vocab_size"] == 8192 and cfg["rms_norm_eps"] == 1e-5
    assert info["shape"] == "llama3-8b" and info["acceptance"] == list(PS)
    assert set(info["drafts"]) == {"0.6", "0.9"} and info["build_s"] > 0
    # one target, a draft folder per value, sharing the random parts (only the construction differs)
    a, b = (load_all(llama / f"draft-{p}") for p in ("0.6", "0.9"))
    assert torch.equal(a["midlayer.mlp.up_proj.weight"], b["midlayer.mlp.up_proj.weight"])
    assert not torch.equal(a["lm_head.weight"], b["lm_head.weight"])
    assert a["d2t"].shape == (1536,) and int(a["t2d"].sum()) == 1536 and a["t2d"].shape == (8192,)
    assert not (llama / "draft").exists()


def test_moe_config_is_deepseek_v3_bf16(moe):
    cfg = json.loads((moe / "target" / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and "quantization_config" not in cfg
    assert cfg["first_k_dense_replace"] == 1 and cfg["n_routed_experts"] == 4
    w = load_all(moe / "target")
    assert w["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == torch.float32
    assert w["model.layers.2.mlp.experts.3.up_proj.weight"].dtype == torch.bfloat16
    assert not w["model.layers.3.self_attn.o_proj.weight"].any()
    assert not w["model.layers.3.mlp.shared_experts.down_proj.weight"].any()


def test_oracle_and_random_reduced(tmp_path):
    _build(tmp_path / "o", *LLAMA_SMALL, "--acceptance", "oracle")
    assert set(_greedy(tmp_path / "o" / "target", _contexts(6, 1)).argmax(-1).tolist()) == {0}
    _build(tmp_path / "r", *MOE_SMALL, "--acceptance", "random", "--layers", "4")
    logits = _greedy(tmp_path / "r" / "target", _contexts(6, 2))
    assert bool((logits.argmax(-1) < tiny.VOCAB - len(tiny.SPECIALS)).all())


# ----------------------------------------------------------------------------- drafts


def _emulate(draft: Path, prompt: list[int], aux_rows, steps: int) -> list[int]:
    """Extend over the prompt (EAGLE layout), then chained draft steps; the proposals."""
    emu = DraftEmulator(draft)
    for pos in range(len(prompt) - 1):
        prop, aux = emu.step(prompt[pos + 1], aux_rows[pos], pos)
    chain = [prop]
    for k in range(steps - 1):
        prop, aux = emu.step(chain[-1], aux, len(prompt) - 1 + k)
        chain.append(prop)
    return chain


@pytest.mark.parametrize("p", PS)
def test_llama_drafts_follow_g_at_rate_p(llama, p):
    maps = json.loads((llama / "maps.json").read_text())
    f, g = maps["f"], maps["g_by_acceptance"][f"{p:g}"]
    rng = random.Random(5)
    for _ in range(3):
        prompt = [rng.randrange(tiny.VOCAB) for _ in range(rng.randint(3, 20))]
        prompt.append(f[prompt[-1]])
        aux = torch.randn(len(prompt), 3 * 256)
        want = [g[prompt[-1]]]
        for _ in range(3):
            want.append(g[want[-1]])
        assert _emulate(llama / f"draft-{p:g}", prompt, aux, 4) == want
    t, agree = 0, 0
    for _ in range(400):
        agree += f[t] == g[t]
        t = f[t]
    assert abs(agree / 400 - p) < 0.08


@requires_sglang
@pytest.mark.sglang
def test_reduced_8b_draft_loads_in_real_sglang(llama, tmp_path):
    """Real SGLang 0.5.23 LlamaForCausalLMEagle3 + load_weights on the GQA draft: all filled."""
    script = tmp_path / "load.py"
    script.write_text(LOAD_SCRIPT)
    env = subprocess_env(sgl_kernel=True, extra={"SGLANG_USE_CPU_ENGINE": "1"})
    r = subprocess.run([sys.executable, str(script), str(llama / "draft-0.6"), str(llama / "target")],
                       env=env, capture_output=True, text=True, cwd=str(REPO), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(data["loaded"]) == set(data["params"])
    assert data["qkv_equal"] and data["lm_head_equal"]
    assert data["hot"] == list(range(1536))


DS_LOAD_SCRIPT = r"""import json, re, sys
from safetensors.torch import load_file
from sglang.srt.server_args import prepare_server_args
import sglang.srt.runtime_context as rc
target = sys.argv[1]
sa = prepare_server_args(["--model-path", target, "--device", "cpu"])
sa.resolve_once()
rc.publish(sa, role="scheduler")
from transformers import AutoConfig
import sglang.srt.layers.rotary_embedding.factory as rf
rf.get_rope_cpu = lambda *a, **k: rf.get_rope(*a[:8])  # CPU MLA rope insists on yarn; not needed to load
from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
cfg = AutoConfig.from_pretrained(target)
import types
G = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0, rank=0, first_rank=0, last_rank=0, device_group=None, cpu_group=None)
vals = {}
while True:
    try:
        with rc.get_parallel().override(**vals):
            model = DeepseekV3ForCausalLM(cfg)
        break
    except RuntimeError as e:
        m = re.search(r"parallel name '(\w+)' has not been written", str(e))
        if not m: raise
        name = m.group(1)
        vals[name] = G if name.endswith("group") else 0

loaded = {}
for name, p in model.named_parameters():
    orig = getattr(p, "weight_loader", None)
    def rec(param, w, *a, _n=name, _o=orig, **k):
        loaded.setdefault(_n, []).append(str(a[0]) if a else (str(k.get("shard_id")) if k else None))
        if _o is None:
            param.data.copy_(w)
        else:
            _o(param, w, *a, **k)
    p.weight_loader = rec
import glob
weights = {}
for f in glob.glob(target + "/*.safetensors"):
    weights.update(load_file(f))
model.load_weights(list(weights.items()))
params = dict(model.named_parameters())
print(json.dumps({"params": sorted(params), "loaded": sorted(loaded), "n_tensors": len(weights),
                  "n_calls": sum(len(v) for v in loaded.values()),
                  "missing": sorted(set(params) - set(loaded))}))
"""


@requires_sglang
@pytest.mark.sglang
def test_reduced_moe_target_loads_in_real_sglang(moe, tmp_path):
    """Real SGLang 0.5.23 DeepseekV3ForCausalLM + its load_weights on the reduced moe target:
    every parameter filled (MLA fused q_a/kv_a, stacked experts w13/w2, shared experts, gate and
    its correction bias), every tensor consumed (q_a_proj + kv_a_proj_with_mqa arrive as one call).
    On CPU SGLang's MLA rope insists on yarn scaling; the script swaps in the plain rope builder,
    which only matters for a forward, not for loading."""
    script = tmp_path / "load_ds.py"
    script.write_text(DS_LOAD_SCRIPT)
    env = subprocess_env(sgl_kernel=True, extra={"SGLANG_USE_CPU_ENGINE": "1"})
    r = subprocess.run([sys.executable, str(script), str(moe / "target")], env=env,
                       capture_output=True, text=True, cwd=str(REPO), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout.strip().splitlines()[-1])
    assert data["missing"] == [] and len(data["params"]) > 0
    layers = json.loads((moe / "target" / "config.json").read_text())["num_hidden_layers"]
    assert data["n_calls"] + layers == data["n_tensors"]


# ----------------------------------------------------------------------------- wiring


def _hidden_states(target: Path, ids: list[int]):
    with torch.no_grad():
        out = _model(target)(torch.tensor([ids]), output_hidden_states=True)
    return [h[0] for h in out.hidden_states]  # loop / HF index k = output of layer k-1


def test_wiring_blocks_live_only_at_trained_outputs(wired):
    info = json.loads((wired / "tiny.json").read_text())
    lay = info["wiring"]["layout"]
    hs = _hidden_states(wired / "target", _contexts(1, 9, 12)[0])
    for L in TRAINED:
        a, b = lay["blocks"][str(L)]
        assert float(hs[L + 1][:, a:b].abs().min()) > 3.9  # kappa * (+-1) at the output of L
        assert float(hs[L][:, a:b].abs().max()) < 1e-3  # not yet written
        assert float(hs[L + 2][:, a:b].abs().max()) < 1e-3  # erased by layer L+1
    tok = lay["token_dims"]
    assert torch.allclose(hs[-2][:, :tok].abs(), torch.ones_like(hs[-2][:, :tok]), atol=1e-3)


def test_wiring_right_capture_p_neighbour_random(wired):
    """Feed the draft the real target hidden states: right layers -> g (agree ~P); a neighbour
    (outputs of L+1, or L-1) -> the first proposal is noise (agree ~0)."""
    maps = json.loads((wired / "maps.json").read_text())
    f, g = maps["f"], maps["g"]
    draft = wired / "draft"
    rng = random.Random(17)
    right = plus = minus = 0
    n = 40
    for _ in range(n):
        prompt = [rng.randrange(tiny.VOCAB) for _ in range(rng.randint(4, 12))]
        prompt.append(f[prompt[-1]])
        hs = _hidden_states(wired / "target", prompt)
        x = prompt[-1]

        def first(layers_ours, hs=hs, prompt=prompt):
            aux = torch.cat([hs[L + 1] for L in layers_ours], dim=-1)
            return _emulate(draft, prompt, aux, 1)[0]

        prop = first(TRAINED)
        assert prop == g[x]
        right += prop == f[x]
        plus += first([L + 1 for L in TRAINED]) == f[x]
        minus += first([L - 1 for L in TRAINED]) == f[x]
    assert right / n > 0.6
    assert plus / n < 0.1 and minus / n < 0.1


def test_wiring_record_and_layers_check(wired, capsys):
    info = json.loads((wired / "tiny.json").read_text())
    w = info["wiring"]
    assert info["trained_on"] == TRAINED and w["default_capture_right"] is False
    assert w["fix"] == "--aux-layers 1,3,5"
    cfg = json.loads((wired / "draft" / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == w["aux_config_ids"]
    capsys.readouterr()
    rc = cli.main(["layers", "check", "--target", str(wired / "target"), "--draft", str(wired / "draft"),
                   "--sglang-version", "0.5.23", "--trained-on", "1,3,5"])
    text = capsys.readouterr().out
    assert rc == 1
    assert "captures (output of decoder layer k" in text
    default = ",".join(map(str, w["default_capture"]))
    assert f"prefill + decode: {default}" in text
    assert "--aux-layers 1,3,5" in text
    # the fix: config ids that capture the trained layers -> consistent
    from sglang_eagle3_ext.runtime import layers

    fam = layers.FAMILIES["llama" if wired.name == "llama" else "deepseek_v2"]
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = layers.ours_to_config(fam, "0.5.23", TRAINED, 8)
    fixed = wired.parent / "fixed.json"
    fixed.write_text(json.dumps(cfg))
    assert cli.main(["layers", "check", "--target", str(wired / "target"), "--draft", str(fixed),
                     "--sglang-version", "0.5.23", "--trained-on", "1,3,5"]) == 0


# ----------------------------------------------------------------------------- refusals


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *args], capture_output=True,
                          text=True, env=subprocess_env(), cwd=str(REPO), timeout=120)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
@pytest.mark.parametrize("shape, gb", [("llama3-8b", "needs 18.0 GB"), ("moe", "needs 56.6 GB")])
def test_real_size_refused_on_cpu(tmp_path, shape, gb):
    r = _cli(["tiny", "--shape", shape, "--out", str(tmp_path / "x")])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and gb in lines[-1] and "GB of bf16 weights" in lines[-1] and "--force" in lines[-1], r.stderr
    assert not (tmp_path / "x" / "target").exists()


@pytest.mark.parametrize("args", [
    ["--shape", "llama3-9b"], ["--hidden", "abc"], ["--layers", "2"], ["--kv-heads", "3"],
    ["--hidden", "100"], ["--vocab", "1000"], ["--set", "nope=1"], ["--set", "layers"],
    ["--heads", "0"], ["--acceptance", "oracle,0.5"], ["--acceptance", "0.5,0.5"],
    ["--acceptance", "0.5", "--trained-on", "1,2"], ["--acceptance", "oracle", "--trained-on", "1"],
    ["--acceptance", "0.5", "--trained-on", "emb,1"], ["--acceptance", "0.5", "--trained-on", "3"],
    ["--shape", "moe", "--experts", "4", "--active-experts", "8", "--hidden", "256"],
])
def test_bad_inputs_exit_2_one_line(tmp_path, args):
    r = _cli(["tiny", "--out", str(tmp_path / "x"), *args])
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("where", ["/etc/passwd/x", "FILE/x"])
def test_out_under_a_file(tmp_path, where):
    f = tmp_path / "FILE"
    f.write_text("x")
    r = _cli(["tiny", "--out", where.replace("FILE", str(f))])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and "a file" in lines[-1], r.stderr


def test_sizes_of_real_shapes():
    from sglang_eagle3_ext.tiny import shapes

    t8, d8 = tiny.needed_bytes(shapes.LLAMA3_8B)
    assert 16.0e9 < t8 < 16.1e9  # 8.03 B params
    tm, dm = tiny.needed_bytes(shapes.MOE)
    assert 50e9 < tm < 56e9 and dm < 5e9


@pytest.mark.parametrize("args, want", [(["--shape", "nope"], "--shape must be one of"),
                                        (["--shape", "llama3-8b"], "GB of bf16 weights")])
def test_demo_shape_pass_through_refusals(tmp_path, args, want):
    if torch.cuda.is_available() and "GB" in want:
        pytest.skip("checks the no-GPU refusal")
    r = _cli(["demo", "--dry-run", "--out", str(tmp_path / "d"), *args])
    assert r.returncode == 2 and want in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("base", ["llama", "moe"])
def test_gpu_code_path_bf16_exact(tmp_path, base):
    """The GPU build path (bf16 tensors from the start: Gen on 'cpu:bf16'), checked with a bf16
    transformers forward: greedy == f, and the wiring block is exactly +-kappa at the output of L
    and exactly 0 after layer L+1 erased it (the powers-of-two design, no rounding left)."""
    args = (LLAMA_SMALL if base == "llama" else MOE_SMALL)
    shape = cli_shape(args)
    m = tiny.build(tmp_path / "w", 0.8, shape=shape, trained_on=TRAINED, device="cpu:bf16")
    assert m.info["device"] == "cpu:bf16"
    maps = json.loads((m.root / "maps.json").read_text())
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(m.target), dtype=torch.bfloat16).eval()
    ctx = _contexts(8, seed=4, length=10)
    with torch.no_grad():
        out = model(torch.tensor(ctx), output_hidden_states=True)
    assert out.logits[:, -1].argmax(-1).tolist() == [maps["f"][c[-1]] for c in ctx]
    lay = m.info["wiring"]["layout"]
    hs = out.hidden_states
    for L in TRAINED:
        a, b = lay["blocks"][str(L)]
        assert set(hs[L + 1][..., a:b].abs().unique().tolist()) == {4.0}
        assert not hs[L + 2][..., a:b].any() and not hs[L][..., a:b].any()


def cli_shape(args: list[str]):
    """The Shape the tiny command builds from these flags."""
    import argparse

    from sglang_eagle3_ext.commands import tiny as cmd

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    return cmd.shape_from_args(p.parse_args(["--out", "x", *args]))


def test_verify_flag_checks_the_built_target(tmp_path, capsys):
    """`--verify`: the transformers bf16 forward confirms f and the exact wiring blocks; a wrong
    expectation (shuffled f) fails it."""
    root = tmp_path / "v"
    capsys.readouterr()
    assert cli.main(["tiny", "--out", str(root), "--device", "cpu", *LLAMA_SMALL, "--acceptance", "0.8",
                     "--trained-on", "1,3,5", "--verify"]) == 0
    text = capsys.readouterr().out
    assert "verify: target greedy right on 8/8 contexts, wiring blocks exact at 3/3 layers" in text
    assert json.loads((root / "tiny.json").read_text())["verify"]["ok"] is True
    from sglang_eagle3_ext.tiny.verify import verify

    maps = json.loads((root / "maps.json").read_text())
    maps["f"] = maps["f"][1:] + maps["f"][:1]
    (root / "maps.json").write_text(json.dumps(maps))
    res = verify(root, device="cpu")
    assert res["ok"] is False and res["wiring_exact_layers"] == 3


def test_shards_and_rebuild_leave_no_stale_files(tmp_path):
    """Several shards + index when over the limit; a smaller rebuild removes them."""
    from sglang_eagle3_ext.tiny.store import ShardWriter

    folder = tmp_path / "t"
    w = ShardWriter(folder, max_bytes=3000)
    for i in range(4):
        w.add(f"x.{i}", torch.ones(500))  # 1000 bytes in bf16: 3 per shard
    assert w.close() == 4000
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == ["model-00001-of-00002.safetensors",
                                                         "model-00002-of-00002.safetensors"]
    assert sorted(load_all(folder)) == ["x.0", "x.1", "x.2", "x.3"]
    w = ShardWriter(folder)
    w.add("y", torch.zeros(3))
    w.close()
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]
