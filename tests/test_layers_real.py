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
