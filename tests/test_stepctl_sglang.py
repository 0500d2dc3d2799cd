"""Step control through SGLang 0.5.23's own machinery: ``load_plugins()`` runs our entry point,
its real ``HookRegistry`` applies the hooks, and its real ``AdaptiveController`` with its real
``AdaptiveSpeculativeParams`` (one tier, candidates 0..5, read from a config file) is held.

Faked (GPU objects only): the worker's ``build_adaptive_runtime_state`` / ``apply_runtime_state``
(real ones build attention backends and CUDA graphs); here they return and apply plain markers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, requires_sglang, subprocess_env

CHILD = r'''
import json, os, tempfile, types
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang_eagle3_ext import plugin, stepctl

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
R = {"registered": [h.target for h in plugin._S.registered], "patched": sorted(HookRegistry._patched)}
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
    runs = {"hold": {"SGLANG_EAGLE3_HOLD": "2"},
            "both": {"SGLANG_EAGLE3_HOLD": "2", "SGLANG_EAGLE3_POLICY": "/nowhere/scan.json"}}
    procs = {n: subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, env=_env(e), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n, e in runs.items()}
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
    assert r["ran"] == [5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0]  # blocks of 2, then the turn
    assert r["applied"] == [5, 4, 3, 2, 1, 0]  # init's own activation, then one per block change
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
