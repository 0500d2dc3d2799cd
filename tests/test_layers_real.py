"""The override against the REAL installed SGLang (0.5.23): real model classes, real methods.

One subprocess imports SGLang once (8-30 s on CPU). The model objects are bare ``nn.Module``s of
the real classes with only the attributes ``set_eagle3_layers_to_capture`` reads (building the real
models needs a GPU and weights); the methods and the class names are SGLang's own.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import requires_sglang, subprocess_env

SCRIPT = r'''
import json, os, sys
from types import SimpleNamespace
import sglang_eagle3_ext.runtime.layers as L
heavy = sorted(m for m in sys.modules if m == "torch" or m == "sglang" or m.startswith("sglang."))
import torch
from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM
from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration
from sglang.srt.models.llama import LlamaForCausalLM

class Inner:
    layers_to_capture = None

def bare(cls, n, text_config=False):
    m = cls.__new__(cls)
    torch.nn.Module.__init__(m)
    m.pp_group = SimpleNamespace(is_last_rank=True)
    m.model = Inner()
    m.config = (SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=n)) if text_config
                else SimpleNamespace(num_hidden_layers=n))
    return m

# What the source patch / plugin AROUND hook does: every set_eagle3_layers_to_capture goes
# through override_layer_ids first (KimiK25 and the DeepSeek class it delegates to).
for cls in (DeepseekV2ForCausalLM, KimiK25ForConditionalGeneration, LlamaForCausalLM):
    real = cls.set_eagle3_layers_to_capture
    def wrapped(self, layer_ids=None, _real=real):
        return _real(self, L.override_layer_ids(self, layer_ids))
    cls.set_eagle3_layers_to_capture = wrapped

out = {"heavy_at_import": heavy, "version": L._sglang_version()}
kimi = bare(KimiK25ForConditionalGeneration, 61, text_config=True)
kimi.language_model = bare(DeepseekV3ForCausalLM, 61)
for name, ids in (("cfg", [2, 30, 58]), ("noarg", None)):
    kimi.set_eagle3_layers_to_capture(ids)
    out["kimi_" + name] = kimi.language_model.model.layers_to_capture
ds = bare(DeepseekV3ForCausalLM, 61)
os.environ[L.ENV] = "0,30,58"   # output of layer 0 first: dodge the 'first id == 1' heuristic
ds.set_eagle3_layers_to_capture([2, 30, 58])
out["ds_layer0"] = sorted(ds.model.layers_to_capture)
llama = bare(LlamaForCausalLM, 32)
os.environ[L.ENV] = "emb,15,28"  # 0.5.23 llama: layer-boundary capture takes the embeddings
llama.set_eagle3_layers_to_capture([2, 16, 29])
out["llama_emb"] = llama.model.layers_to_capture
os.environ[L.ENV] = "2,16,31"   # last layer's output is never captured: clear error at startup
try:
    llama.set_eagle3_layers_to_capture([2, 16, 29])
    out["last_layer_error"] = None
except L.LayerError as exc:
    out["last_layer_error"] = str(exc)
print("RESULT " + json.dumps(out))
'''


@requires_sglang
def test_override_with_real_sglang_classes():
    env = subprocess_env(extra={"SGLANG_EAGLE3_AUX_LAYERS": "2,30,58"})
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    assert res["heavy_at_import"] == []  # cheap to import inside every scheduler process
    assert res["version"] == "0.5.23"
    # outputs of layers 2,30,58 = loop 3,31,59, for config ids and for the no-arg call alike
    assert sorted(res["kimi_cfg"]) == sorted(res["kimi_noarg"]) == [3, 31, 59]
    assert res["ds_layer0"] == [1, 31, 59]
    assert res["llama_emb"] == [0, 16, 29]
    assert "last layer" in res["last_layer_error"]
    # logged once per process, in our convention and as loop indices
    logs = [x for x in proc.stderr.splitlines() if "EAGLE-3 aux layers" in x]
    assert len(logs) == 1 and "outputs of layers 2, 30, 58 (loop indices [3, 31, 59]" in logs[0]


def test_cli_entry_point_exit_codes(tmp_path):
    """The installed console entry (python -m) end to end: 0 consistent, 1 not, 2 bad input."""
    from test_layers import DATA, KIMI

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "layers", "check", *argv],
                              capture_output=True, text=True, timeout=60)

    ok = run("--target", str(KIMI), "--draft", str(DATA / "draft_3_31_59"), "--sglang-version", "0.5.23",
             "--trained-on", "2,30,58")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("--target", str(KIMI), "--draft", str(DATA / "draft_minus1"), "--sglang-version", "0.5.23",
              "--trained-on", "2,30,58")
    assert bad.returncode == 1 and "embedding output (emb" in bad.stdout
    missing = run("--target", str(tmp_path / "nope"), "--draft", str(DATA / "draft_3_31_59"))
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr


FAMILIES_SCRIPT = r'''
import importlib, json, sys, time
from pathlib import Path
from types import SimpleNamespace
t0 = time.time()
import torch
from sglang_eagle3_ext.runtime import layers as L
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import capture_rules, layer_check
env = locate(None)
idx = capture_rules._index((Path(env.package_dir) / "srt" / "models").resolve())
table = capture_rules.pinned()[env.version]

class Inner:
    def __init__(self, n):
        self.layers_to_capture = None
        self.layers = [torch.nn.Identity() for _ in range(n)]
    def set_eagle3_layers_to_capture(self, l):
        self.layers_to_capture = list(l)

def bare(cls, n):
    m = cls.__new__(cls)
    torch.nn.Module.__init__(m)
    m.pp_group = SimpleNamespace(is_last_rank=True)
    m.config = SimpleNamespace(num_hidden_layers=n, text_config=SimpleNamespace(num_hidden_layers=n))
    m.model = Inner(n)
    m.language_model = Inner(n)
    return m

def captured(o):
    for a in ("language_model", "model"):
        x = getattr(o, a, None)
        if isinstance(x, Inner):
            if x.layers_to_capture is not None:
                return x.layers_to_capture
        elif x is not None:
            got = captured(x)
            if got is not None:
                return got
    return None

out = {"compared": [], "skipped": {}, "mismatch": []}
from sglang.srt.runtime_context import get_parallel
try:
    get_parallel().override_permanently(pp_group=SimpleNamespace(is_last_rank=True))
    out["pp"] = "override"
except Exception as exc:
    out["pp"] = repr(exc)[:200]
n = 48
for arch, cap in sorted(table.targets.items()):
    if cap.rule not in capture_rules.RULES:
        continue
    f = idx.entry[arch]
    try:
        mod = importlib.import_module("sglang.srt.models." + f[:-3])
        cls = getattr(mod, arch)
    except Exception as exc:  # CPU box: some model files need GPU-only packages
        out["skipped"][arch] = f"{type(exc).__name__}: {str(exc)[:80]}"
        continue
    fam = layer_check.resolve_family(arch, env.version)[0]
    for ids in (None, [2, 24, 45], [1, 23, 44], [3, 46, 48]):
        obj = bare(cls, n)
        if cap.via:
            attr, name = cap.via.split(";")[0].split(" -> ")
            dc = capture_rules._resolve(idx, name.strip(), f)
            dmod = importlib.import_module("sglang.srt.models." + dc.file[:-3])
            setattr(obj, attr.strip(), bare(getattr(dmod, dc.name), n))
        obj.set_eagle3_layers_to_capture(None if ids is None else list(ids))
        real = captured(obj)
        ours = L.config_to_loop(fam, env.version, ids, n)
        if real != ours:
            out["mismatch"].append([arch, ids, real, ours])
    out["compared"].append(arch)
# served classes the table says have no capture: none of those already imported has the method
none_checked = []
for arch in sorted(table.served - set(table.targets) - set(table.drafts)):
    f = idx.entry.get(arch)
    mod = sys.modules.get("sglang.srt.models." + f[:-3]) if f else None
    cls = getattr(mod, arch, None) if mod else None
    if cls is not None:
        none_checked.append([arch, hasattr(cls, capture_rules.METHOD)])
out["none_checked"] = none_checked
out["seconds"] = round(time.time() - t0, 1)
print("RESULT " + json.dumps(out))
'''


@requires_sglang
def test_every_eagle3_class_of_installed_release_matches_the_table():
    """Every target class the installed SGLang (0.5.23) serves with EAGLE-3, imported for real
    (Python's own MRO and the wrapper's real delegate class): its set_eagle3_layers_to_capture,
    run on a bare instance (building the model needs a GPU and weights), stores exactly what
    `layers check` computes; served classes the table calls 'none' lack the method."""
    proc = subprocess.run([sys.executable, "-c", FAMILIES_SCRIPT], env=subprocess_env(),
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert res["mismatch"] == [], res["mismatch"]
    assert len(res["compared"]) >= 60 and not res["skipped"], res["skipped"]
    for name in ("Qwen3NextForCausalLM", "Llama4ForConditionalGeneration", "MiniMaxM2ForCausalLM",
                 "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
                 "KimiK25ForConditionalGeneration", "GptOssForCausalLM", "Glm4MoeLiteForCausalLM"):
        assert name in res["compared"]
    assert res["none_checked"] and not any(has for _, has in res["none_checked"]), res["none_checked"]
