"""The throughput policy through SGLang 0.5.23's own machinery: ``load_plugins()`` runs our entry
point with ``SGLANG_EAGLE3_POLICY`` set, the real ``HookRegistry`` applies the step-control hooks,
and the real ``AdaptiveController`` (real ``AdaptiveSpeculativeParams``, one tier of candidates
0..5, as `launch --policy` writes it) is driven by the policy.

Faked (GPU objects only): the worker's ``build_adaptive_runtime_state`` / ``apply_runtime_state``
(real ones build attention backends and CUDA graphs); here they return and apply plain markers.
The accept counts are scripted: every request gets 1 draft right, so the policy, started at 5
steps from the H200 scan, moves down once the online rates outweigh the scan's prior.
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
load_plugins()
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang_eagle3_ext.runtime import stepctl

class Worker:
    speculative_num_steps = 5
    def __init__(self): self.applied = []
    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        return types.SimpleNamespace(speculative_num_steps=speculative_num_steps)
    def apply_runtime_state(self, state):
        self.applied.append(state.speculative_num_steps); self.speculative_num_steps = state.speculative_num_steps

cfg = os.path.join(tempfile.mkdtemp(), "adaptive.json")
json.dump({"1": {"candidate_steps": [0, 1, 2, 3, 4, 5]}}, open(cfg, "w"))
R = {}
w = Worker()
ctrl = AdaptiveController(w, AdaptiveSpeculativeParams(initial_steps=5, cfg_path=cfg))
ctrl.init_states(cuda_graph_bs=[1, 2, 4, 8, 16, 32])
d = stepctl.installed()
R["decider"] = [d.name, list(d.candidates), d.table.graph_bs]
ran, prev = [], None
for i in range(300):
    ctrl.activate_step_by_batch(8)
    ran.append(w.speculative_num_steps)
    if prev is not None:                     # the overlap scheduler: the previous batch's counts
        ctrl.on_verify_complete(prev, batch_size=8)
    prev = [min(1, w.speculative_num_steps)] * 8
R["first"], R["last"] = ran[:5], ran[-5:]
R["ema_batches"] = ctrl.params._slots[1]._batch_count   # SGLang's EMA never fed
R["control"] = stepctl.control()["policy"]["switches"]
# a scan that costs none of the built states: this server refuses to start
bad = os.path.join(tempfile.mkdtemp(), "scan.json")
json.dump({"schema": "eagle3_scan/1", "cells": [{"steps": 7, "bs": 1, "cycle_ms": 5.0, "accept_len": 3.0}]}, open(bad, "w"))
os.environ["SGLANG_EAGLE3_POLICY"] = bad
try:
    AdaptiveController(Worker(), AdaptiveSpeculativeParams(initial_steps=5, cfg_path=cfg)).init_states(cuda_graph_bs=[1, 8])
except RuntimeError as exc:
    R["refused"] = str(exc)
print("RESULT " + json.dumps(R))
'''


@requires_sglang
@pytest.mark.sglang
def test_real_controller_follows_the_policy():
    env = subprocess_env()
    for k in ("EAGLE3_PROFILE", "SGLANG_EAGLE3_NCCL", "SGLANG_EAGLE3_AUX_LAYERS", "SGLANG_PLUGINS",
              "SGLANG_EAGLE3_HOLD", "SGLANG_EAGLE3_HOLD_STEPS"):
        env.pop(k, None)
    env["SGLANG_EAGLE3_POLICY"] = str(REPO / "tests" / "data" / "policy" / "scan-h200-8b-p08.json")
    p = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=240)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["decider"] == ["policy", [0, 1, 2, 3, 4, 5], [1, 2, 4, 8, 16, 32]]
    assert r["first"] == [5] * 5                      # the scan's prior: 5 steps at bs 8
    assert r["last"] and max(r["last"]) <= 2 and r["control"] >= 1   # 1 draft right each: down to 1-2
    assert r["ema_batches"] == 0
    assert "none of the server's states" in r.get("refused", ""), r
    assert "step control: policy decider installed" in p.stderr
