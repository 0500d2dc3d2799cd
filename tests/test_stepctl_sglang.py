"""Step control through SGLang 0.5.23's own machinery: ``load_plugins()`` runs our entry point,
its real ``HookRegistry`` applies the hooks, and its real ``AdaptiveController`` with its real
``AdaptiveSpeculativeParams`` (one tier, read from a config file) is held; in the end-to-end child
the real ``EAGLEWorkerV2.forward_batch_generation`` decode branch asks it first
(``activate_step_by_batch``) and the probes tag each cycle after the switch.

Faked (GPU objects only): the worker's ``build_adaptive_runtime_state`` / ``apply_runtime_state``
(real ones build attention backends and CUDA graphs; here they return and apply plain markers),
and, as in tests/test_plugin.py, the bodies of ``EagleDraftWorker.draft`` /
``_draft_extend_for_decode`` and ``run_eagle_verify``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, requires_sglang, subprocess_env

from sglang_eagle3_ext.runtime import hold

CHILD = r'''
import json, os, tempfile, types
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang_eagle3_ext.runtime import stepctl
from sglang_eagle3_ext.runtime.plugin import procstate

class Worker:
    speculative_num_steps = 5
    def __init__(self): self.applied = []
    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        return types.SimpleNamespace(speculative_num_steps=speculative_num_steps,
                                     speculative_num_draft_tokens=speculative_num_draft_tokens, bs=cuda_graph_bs)
    def apply_runtime_state(self, state):
        self.applied.append(state.speculative_num_steps); self.speculative_num_steps = state.speculative_num_steps

cfg = os.path.join(tempfile.mkdtemp(), "adaptive.json")
json.dump({"1": {"candidate_steps": [0, 1, 2, 3, 4, 5]}}, open(cfg, "w"))
R = {"registered": [h.target for h in procstate._S.registered], "patched": sorted(HookRegistry._patched)}
w = Worker()
ctrl = AdaptiveController(w, AdaptiveSpeculativeParams(initial_steps=5, cfg_path=cfg))
try:
    ctrl.init_states(cuda_graph_bs=[1, 2, 4, 8])
except RuntimeError as exc:
    R["refused"] = str(exc)
    print("RESULT " + json.dumps(R)); raise SystemExit(0)
d = stepctl.installed()
R["decider"] = [d.name, list(d.candidates)]
ran, prev = [], None
for i in range(14):
    ctrl.activate_step_by_batch(3)          # the decode branch, bs 3 (padded to 4)
    ran.append(w.speculative_num_steps)
    if prev is not None:                     # the overlap scheduler: the previous batch's counts
        ctrl.on_verify_complete(prev, batch_size=3)
    prev = [1, 1, 1]
R["ran"], R["applied"] = ran, w.applied
R["ema_batches"] = ctrl.params._slots[1]._batch_count   # SGLang's EMA never fed
R["observed"] = d.observed
print("RESULT " + json.dumps(R))
'''

# The real 0.5.23 decode branch with the probes and the hold schedule on (test_plugin.py's stand-ins).
E2E = r'''
import json, os, shlex, tempfile, types
import torch
from transformers import LlamaConfig
from sglang.srt.speculative import eagle_worker_v2 as ew
class VerifyInput:
    kv_loc_plan = None
    def is_verify_input(self): return True
ew.EagleDraftWorker.draft = lambda self, batch, *, with_topology=False: VerifyInput()
ew.EagleDraftWorker._draft_extend_for_decode = lambda self, batch, out, *, kv_loc_plan=None: None
ew.run_eagle_verify = lambda batch, **kw: types.SimpleNamespace(
    new_seq_lens=batch.seq_lens + 1, can_run_cuda_graph=False, speculative_num_draft_tokens=kw["num_draft_tokens"])
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.plugin import procstate

d = tempfile.mkdtemp()
common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
LlamaConfig(num_hidden_layers=4, architectures=["LlamaForCausalLM"], **common).save_pretrained(d + "/t")
LlamaConfig(num_hidden_layers=1, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=512, **common).save_pretrained(d + "/d")
from sglang.srt.server_args import prepare_server_args
from sglang.srt.runtime_context import publish
sa = prepare_server_args(shlex.split(f"--model-path {d}/t --speculative-algorithm EAGLE3 --speculative-draft-model-path {d}/d "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --device cpu"))
sa.resolve_once(); publish(sa, role="scheduler")

dw = object.__new__(ew.EagleDraftWorker)
dw.parallel_layout = types.SimpleNamespace(tp_group=None, disable_cp=False); dw.draft_runner = None
w = object.__new__(ew.EAGLEWorkerV2)
w._draft_worker, w._target_worker = dw, None
for a in ("req_to_token_pool", "token_to_kv_pool_allocator", "plan_stream", "plan_stream_ctx", "device"):
    setattr(w, a, None)
w.speculative_num_steps, w.topk, w.speculative_num_draft_tokens = 3, 1, 4
def build(speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
    return types.SimpleNamespace(speculative_num_steps=speculative_num_steps, speculative_num_draft_tokens=speculative_num_draft_tokens)
def apply(state):
    w.speculative_num_steps, w.speculative_num_draft_tokens = state.speculative_num_steps, state.speculative_num_draft_tokens
w.build_adaptive_runtime_state, w.apply_runtime_state = build, apply
cfg = os.path.join(d, "adaptive.json")
json.dump({"1": {"candidate_steps": [1, 2, 3]}}, open(cfg, "w"))
w.adaptive_controller = AdaptiveController(w, AdaptiveSpeculativeParams(initial_steps=3, cfg_path=cfg))
w.adaptive_controller.init_states(cuda_graph_bs=[1, 2, 4])

probes.reset()
mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
ran, prev = [], None
for i in range(8):
    batch = types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, seq_lens=torch.tensor([5, 7]),
                                  spec_info=types.SimpleNamespace(is_verify_input=lambda: False))
    w.forward_batch_generation(batch)
    ran.append(w.speculative_num_steps)
    if prev is not None:  # the scheduler processes the previous batch's result now
        w.on_verify_complete_cpu(prev, batch_size=2)
    prev = [w.speculative_num_steps, 0]
probes.cycle_begin()
w.on_verify_complete_cpu(prev, batch_size=2)
rec = probes.flush()
R = {"ran": ran, "by_key": {k: [v["cycles"], v["accept_len"], v["draft_tokens"]] for k, v in rec["by_key"].items()},
     "control": rec["control"], "switch": rec["boundary"]["reasons"]["switch"], "missing": procstate._S.missing,
     "registered": [h.target for h in procstate._S.registered]}
print("RESULT " + json.dumps(R))
'''

TARGETS = ["sglang.srt.speculative.adaptive_runtime_state.AdaptiveController." + m
           for m in ("init_states", "activate_step_by_batch", "on_verify_complete")]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = subprocess_env()
    for k in ("EAGLE3_PROFILE", "SGLANG_EAGLE3_NCCL", "SGLANG_EAGLE3_AUX_LAYERS", "SGLANG_PLUGINS",
              "SGLANG_EAGLE3_HOLD", "SGLANG_EAGLE3_HOLD_STEPS", "SGLANG_EAGLE3_POLICY"):
        env.pop(k, None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def children() -> dict[str, tuple[dict, str]]:
    runs = {"hold": (CHILD, {"SGLANG_EAGLE3_HOLD": "2"}),
            "both": (CHILD, {"SGLANG_EAGLE3_HOLD": "2", "SGLANG_EAGLE3_POLICY": "/nowhere/scan.json"}),
            "e2e": (E2E, {"SGLANG_EAGLE3_HOLD": "2", "EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_MODE": "wall",
                          "EAGLE3_PROFILE_EVERY": "1000"})}
    procs = {n: subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=_env(e), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n, (code, e) in runs.items()}
    out = {}
    for n, p in procs.items():
        stdout, stderr = p.communicate(timeout=240)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert p.returncode == 0 and lines, f"{n}:\n{stdout[-2000:]}\n{stderr[-4000:]}"
        out[n] = (json.loads(lines[-1][len("RESULT "):]), stderr)
    return out


@requires_sglang
@pytest.mark.sglang
def test_real_controller_holds_the_schedule(children):
    r, log = children["hold"]
    assert r["registered"] == TARGETS and set(TARGETS) <= set(r["patched"])
    assert r["decider"] == ["hold", [5, 4, 3, 2, 1, 0]]
    # bs 3 pads to the graph size 4: that level's schedule, blocks of 1..3 cycles (mean 2)
    ran = [hold.slot(i, 2, (5, 4, 3, 2, 1, 0), 4)[1] for i in range(14)]
    assert r["ran"] == ran and len(set(ran)) >= 4
    changes = [b for a, b in zip([5, *ran], ran, strict=False) if a != b]
    assert r["applied"] == [5, *changes]  # init's own activation, then one per change of step count
    assert r["ema_batches"] == 0 and r["observed"] == 13
    assert "step control: hold decider installed" in log


@requires_sglang
@pytest.mark.sglang
def test_hold_with_policy_refuses_to_start(children):
    r, log = children["both"]
    assert r["registered"] == TARGETS[:1]
    assert r["refused"] == ("sglang-eagle3-ext: SGLANG_EAGLE3_HOLD and SGLANG_EAGLE3_POLICY are both set: "
                            "one decider holds the step count; unset one")
    assert "step control (hold): SGLANG_EAGLE3_HOLD and SGLANG_EAGLE3_POLICY are both set" in log


@requires_sglang
@pytest.mark.sglang
def test_real_decode_branch_switches_inside_and_the_probes_tag_after(children):
    """0.5.23's forward_batch_generation calls activate_step_by_batch first: our hold switches the
    worker there, and the cycle hook's tag (read after the original) has the new step count and
    the draft-token count the verify ran with; counts one cycle late land on their own cycle."""
    r, _ = children["e2e"]
    assert r["missing"] == [] and set(TARGETS) <= set(r["registered"])
    slots = [hold.slot(i, 2, (3, 2, 1), 2) for i in range(8)]  # bs 2: its own level
    ran = [st for _, st in slots]
    assert r["ran"] == ran
    switch = [i for i in range(1, 8) if ran[i] != ran[i - 1]]  # the first cycle at a new count
    steady = {st: sum(1 for i, x in enumerate(ran) if x == st and i not in switch) for st in set(ran)}
    assert r["by_key"] == {f"s{st}.k1.d{st + 1}.b2.e": [n, (st + 2) / 2, st + 1] for st, n in steady.items() if n}
    assert r["switch"] == len(switch)
    assert r["control"] == {"decider": "hold", "block": slots[-1][0], "candidates": [3, 2, 1],
                            "choices": {"2": {str(st): ran.count(st) for st in sorted(set(ran))}}}
