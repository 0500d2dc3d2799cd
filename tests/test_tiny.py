"""Built-in tiny models: files, tokenizer, greedy behaviour of target and draft, real SGLang loading.

The target is checked with the real transformers Llama forward. The draft cannot run on CPU in
SGLang (EAGLE needs a GPU attention backend), so its greedy choices are checked with a plain-torch
re-implementation of SGLang 0.5.16's ``LlamaForCausalLMEagle3`` forward (models/llama_eagle3.py +
llama.py attention, neox RoPE); its weights are checked by loading them into the real SGLang
0.5.23 module with SGLang's own ``load_weights``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli, tiny
from sglang_eagle3_ext.runtime.errors import UserError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import REPO, requires_sglang, subprocess_env  # noqa: E402

P = 0.6


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tiny")
    return {"oracle": tiny.build(root / "oracle", "oracle"),
            P: tiny.build(root / "partial", P, seed=1)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def load_proc(built, tmp_path_factory):
    """Real-SGLang draft load check, started early so it overlaps the CPU-only tests."""
    m = built[P]
    script = tmp_path_factory.mktemp("load") / "load.py"
    script.write_text(LOAD_SCRIPT)
    env = subprocess_env(sgl_kernel=True, extra={"SGLANG_USE_CPU_ENGINE": "1"})
    proc = subprocess.Popen([sys.executable, str(script), str(m.draft), str(m.target)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(REPO))
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    """A real SGLang CPU server (no speculation) on the partial tiny target."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(built[P].target),
           "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
           "--mem-fraction-static", "0.05", "--max-total-tokens", "2048"]
    env = subprocess_env(sgl_kernel=True, extra={"SGLANG_USE_CPU_ENGINE": "1"})
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(REPO))
    yield {"proc": proc, "url": f"http://127.0.0.1:{port}", "log": log}
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@requires_sglang
@pytest.mark.sglang
def test_kickoff_sglang_load(load_proc):
    assert load_proc.poll() in (None, 0)


@requires_sglang
@pytest.mark.sglang
@pytest.mark.slow
def test_kickoff_server(server):
    assert server["proc"].poll() is None


# ----------------------------------------------------------------------------- inputs / CLI


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "nan", "sometimes", ""])
def test_bad_acceptance_is_user_error(bad, tmp_path):
    with pytest.raises(UserError) as ei:
        tiny.parse_acceptance(bad)
    assert ei.value.exit_code == 2
    assert cli.main(["tiny", "--out", str(tmp_path / "x"), "--acceptance", bad]) == 2
    assert not (tmp_path / "x").exists()


def test_parse_acceptance_values():
    assert tiny.parse_acceptance("ORACLE") == "oracle"
    assert tiny.parse_acceptance("random") == "random"
    assert tiny.parse_acceptance("0.25") == 0.25
    assert tiny.parse_acceptance(1) == 1.0


def test_out_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert cli.main(["tiny", "--out", str(f)]) == 2


# ----------------------------------------------------------------------------- files


def test_files_and_configs(built):
    m = built[P]
    for folder in (m.target, m.draft):
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json"):
            assert (folder / name).is_file(), folder / name
    tcfg = json.loads((m.target / "config.json").read_text())
    dcfg = json.loads((m.draft / "config.json").read_text())
    assert tcfg["architectures"] == ["LlamaForCausalLM"] and tcfg["vocab_size"] == 2048
    assert dcfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert dcfg["num_hidden_layers"] == 1 and dcfg["draft_vocab_size"] == 1024
    assert dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert dcfg["norm_output"] is True
    assert "norm_output" not in json.loads((built["oracle"].draft / "config.json").read_text())
    info = json.loads((m.root / "tiny.json").read_text())
    assert info["acceptance"] == P and info["seed"] == 1


def test_draft_tensor_names_and_shapes(built):
    from safetensors.torch import load_file

    w = load_file(str(built[P].draft / "model.safetensors"))
    H = tiny.HIDDEN
    assert w["fc.weight"].shape == (H, 3 * H)
    assert w["midlayer.self_attn.q_proj.weight"].shape == (tiny.HEADS * tiny.HEAD_DIM, 2 * H)
    assert w["lm_head.weight"].shape == (tiny.DRAFT_VOCAB, H)
    assert w["d2t"].dtype == torch.int64 and w["d2t"].shape == (tiny.DRAFT_VOCAB,)
    assert w["t2d"].dtype == torch.bool and int(w["t2d"].sum()) == tiny.DRAFT_VOCAB
    assert all(k.startswith(("midlayer.", "fc.", "norm.", "lm_head.", "embed_tokens.", "d2t", "t2d"))
               for k in w)


def test_tokenizer_offline_with_chat_template(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(built["oracle"].target))
    assert len(tok) == tiny.VOCAB
    assert tok.eos_token == "<|end|>" and tok.convert_tokens_to_ids("<|end|>") == 2047
    text = "Hello tiny world, 42!"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<|user|>\nhi<|end|>\n<|assistant|>\n"
    assert tok.decode([0]) == "!"  # the oracle's greedy token is plain text


def test_same_seed_same_weights(built, tmp_path):
    again = tiny.build(tmp_path / "again", P, seed=1)
    for sub in ("target", "draft"):
        assert ((again.root / sub / "model.safetensors").read_bytes()
                == (built[P].root / sub / "model.safetensors").read_bytes())
    from safetensors.torch import load_file

    emb = [load_file(str(m.target / "model.safetensors"))["model.embed_tokens.weight"]
           for m in (built["oracle"], built[P])]  # seeds 0 and 1
    assert not torch.equal(*emb)


# ----------------------------------------------------------------------------- target greedy (HF)


def _hf_greedy_next(folder: Path, contexts: list[list[int]]) -> list[int]:
    """Real transformers Llama forward, one batch (equal lengths, no padding)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor(contexts)).logits[:, -1]
    return logits.argmax(-1).tolist()


def _contexts(n: int, seed: int = 0, length: int = 24) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(tiny.VOCAB) for _ in range(length)] for _ in range(n)]


def test_oracle_target_always_token_0(built):
    assert set(_hf_greedy_next(built["oracle"].target, _contexts(12))) == {0}


def test_partial_target_is_function_of_last_token(built):
    maps = json.loads((built[P].root / "maps.json").read_text())
    ctx = _contexts(40, seed=5)
    assert _hf_greedy_next(built[P].target, ctx) == [maps["f"][c[-1]] for c in ctx]


# ----------------------------------------------------------------------------- draft emulation


def _rms(x, w, eps=tiny.RMS_EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos: int, theta: float):
    """neox-style rotary embedding (SGLang's default for Llama), x: [heads, head_dim]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = (pos * inv).float()
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class DraftEmulator:
    """Plain-torch LlamaForCausalLMEagle3 (SGLang 0.5.16), greedy topk 1, one sequence.

    Dimensions (heads, KV heads with GQA, head dim, hidden, eps, rope) come from the draft config,
    so the same emulator checks the built-in tiny draft and every shape scaled down."""

    def __init__(self, folder: Path):
        from sglang_eagle3_ext.tiny.store import load_all

        self.w = {k: v.float() if v.is_floating_point() else v for k, v in load_all(folder).items()}
        self.cfg = json.loads((folder / "config.json").read_text())
        self.theta = self.cfg["rope_theta"]
        self.H = self.cfg["hidden_size"]
        self.nh = self.cfg["num_attention_heads"]
        self.nkv = self.cfg["num_key_value_heads"]
        self.hd = self.cfg.get("head_dim") or self.H // self.nh
        self.eps = self.cfg["rms_norm_eps"]
        self.keys: list = []
        self.values: list = []

    def step(self, token: int, hidden, pos: int):
        w, nh, hd, eps = self.w, self.nh, self.hd, self.eps
        p = "midlayer."
        if hidden.shape[-1] != self.H:
            hidden = hidden @ w["fc.weight"].T
        residual = hidden
        x = torch.cat([_rms(w["embed_tokens.weight"][token], w[p + "input_layernorm.weight"], eps),
                       _rms(hidden, w[p + "hidden_norm.weight"], eps)])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(nh, hd)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(self.nkv, hd)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(self.nkv, hd)
        q, k = _rope(q, pos, self.theta), _rope(k, pos, self.theta)
        self.keys.append(k)
        self.values.append(v)
        rep = nh // self.nkv
        K = torch.stack(self.keys, 1).repeat_interleave(rep, 0)  # [heads, n, hd]
        V = torch.stack(self.values, 1).repeat_interleave(rep, 0)
        att = torch.softmax((q.unsqueeze(1) @ K.transpose(1, 2)) * hd**-0.5, dim=-1)
        o = (att @ V).reshape(-1) @ w[p + "self_attn.o_proj.weight"].T
        s = o + residual
        y = _rms(s, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
        s2 = (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T + s
        normed = _rms(s2, w["norm.weight"], eps)
        logits = normed @ w["lm_head.weight"].T
        self.last_logits = logits  # tests of the tree draft read the ranked candidates
        d = int(logits.argmax())
        hot = d + int(w["d2t"][d])
        aux = normed if self.cfg.get("norm_output") else s2
        return hot, aux


def test_partial_draft_emulated_follows_g_and_agrees_at_rate_p(built):
    """Emulated draft: extend over a prompt, then 4 chained steps; proposals == g-chain."""
    m = built[P]
    maps = json.loads((m.root / "maps.json").read_text())
    f, g = maps["f"], maps["g"]
    rng = random.Random(11)
    agree = total = 0
    for trial in range(4):
        emu = DraftEmulator(m.draft)
        prompt = [rng.randrange(tiny.VOCAB) for _ in range(rng.randint(3, 30))]
        x = f[prompt[-1]]  # target's first token
        ids = prompt[1:] + [x]  # EAGLE draft input: next token + target hidden at this position
        target_aux = torch.randn(3 * tiny.HIDDEN)
        for pos, tok in enumerate(ids):
            prop, aux = emu.step(tok, target_aux, pos)
        chain, want = [prop], [g[x]]
        for k in range(3):
            prop, aux = emu.step(chain[-1], aux, len(ids) + k)
            chain.append(prop)
            want.append(g[want[-1]])
        assert chain == want, f"trial {trial}"
        # agreement along the target's own trajectory
        t = x
        for _ in range(150):
            agree += g[t] == f[t]
            total += 1
            t = f[t]
    assert abs(agree / total - P) < 0.08


def test_expected_accept_len_matches_independent_model(built):
    info = built[P].info
    for s in ("1", "2", "3", "4"):
        assert abs(info["expected_accept_len"][s] - tiny.expected_accept_len(P, int(s))) < 0.12
    assert abs(info["agree_fraction_hot"] - P) < 0.05
    assert all(abs(r - P) < 0.1 for r in info["per_position"]["2"])


def test_simulate_accept_extremes():
    n = tiny.DRAFT_VOCAB
    f = [(i + 1) % n for i in range(n)]
    assert tiny.simulate_accept(f, f, 3, cycles=50)[0] == 4.0
    g = [(i + 2) % n for i in range(n)]
    assert tiny.simulate_accept(f, g, 3, cycles=50) == (1.0, [0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------- real SGLang


LOAD_SCRIPT = textwrap.dedent("""
    import json, re, sys
    from safetensors.torch import load_file
    from sglang.srt.server_args import prepare_server_args
    import sglang.srt.runtime_context as rc
    draft = sys.argv[1]; target = sys.argv[2]
    sa = prepare_server_args(["--model-path", target, "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft, "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3", "--device", "cpu"])
    sa.resolve_once()
    rc.publish(sa, role="scheduler")
    from transformers import AutoConfig
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    cfg = AutoConfig.from_pretrained(draft)
    vals = {}
    while True:  # single-process: state the missing rank facts SGLang asks for
        try:
            with rc.get_parallel().override(**vals):
                model = LlamaForCausalLMEagle3(cfg)
            break
        except RuntimeError as e:
            m = re.search(r"parallel name '(\\w+)' has not been written", str(e))
            if not m: raise
            vals[m.group(1)] = 0
    loaded = {}
    for name, p in model.named_parameters():
        orig = getattr(p, "weight_loader", None)
        def rec(param, w, *a, _n=name, _o=orig):
            loaded.setdefault(_n, []).append(a[0] if a else None)
            if _o is None:
                param.data.copy_(w)
            else:
                _o(param, w, *a)
        p.weight_loader = rec
    weights = load_file(draft + "/model.safetensors")
    model.load_weights(list(weights.items()))
    params = dict(model.named_parameters())
    qkv = params["model.layers.0.self_attn.qkv_proj.weight"].data
    import torch
    ref = torch.cat([weights["midlayer.self_attn." + n + "_proj.weight"] for n in "qkv"])
    print(json.dumps({
        "params": sorted(params), "loaded": {k: [str(s) for s in v] for k, v in loaded.items()},
        "n_tensors": len(weights),
        "qkv_equal": bool(torch.equal(qkv.to(ref.dtype), ref)),
        "hot": model.hot_token_id.tolist(),
        "lm_head_equal": bool(torch.equal(params["lm_head.weight"].data.to(torch.bfloat16),
                                          weights["lm_head.weight"])),
    }))
""")


@requires_sglang
@pytest.mark.sglang
def test_draft_loads_every_parameter_in_real_sglang(load_proc):
    """Real SGLang 0.5.23 module + its load_weights: every parameter gets exactly its tensors."""
    stdout, stderr = load_proc.communicate(timeout=240)
    assert load_proc.returncode == 0, stderr[-3000:]
    data = json.loads(stdout.strip().splitlines()[-1])
    assert set(data["loaded"]) == set(data["params"]), "missing parameters"
    assert sorted(data["loaded"]["model.layers.0.self_attn.qkv_proj.weight"]) == ["k", "q", "v"]
    assert sorted(data["loaded"]["model.layers.0.mlp.gate_up_proj.weight"]) == ["0", "1"]
    assert all(len(v) == 1 for k, v in data["loaded"].items() if "qkv" not in k and "gate_up" not in k)
    # every tensor in the file was consumed: one per loader call, plus d2t and t2d
    assert sum(len(v) for v in data["loaded"].values()) + 2 == data["n_tensors"]
    assert data["qkv_equal"] and data["lm_head_equal"]
    assert data["hot"] == list(range(tiny.DRAFT_VOCAB))


def _post(url: str, body: dict, timeout: float = 60) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@requires_sglang
@pytest.mark.sglang
@pytest.mark.slow
def test_real_cpu_server_generates_the_constructed_tokens(server, built):
    """Real `sglang.launch_server --device cpu` loads the tiny target; greedy output == f-chain."""
    proc, url = server["proc"], server["url"]
    deadline = time.monotonic() + 150
    while True:
        assert proc.poll() is None, server["log"].read_text()[-3000:]
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "server not healthy in 150 s\n" + server["log"].read_text()[-3000:]
        time.sleep(1)
    maps = json.loads((built[P].root / "maps.json").read_text())
    prompt = [5, 900, 1500, 77]
    chain, t = [], prompt[-1]
    for _ in range(8):
        t = maps["f"][t]
        chain.append(t)
    res = _post(url + "/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 8, "temperature": 0}})
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(built[P].target))
    assert res["meta_info"]["completion_tokens"] == 8
    assert res["text"] == tok.decode(chain)
    chat = _post(url + "/v1/chat/completions", {"model": "tiny", "max_tokens": 4, "temperature": 0,
                 "messages": [{"role": "user", "content": "hi"}]})
    assert chat["usage"]["completion_tokens"] == 4
