"""The plugin and the step control on trees and states a user can end up with (issue 34): a
partial source patch (case 13), a held step count whose runtime state is gone (case 14).

Real: SGLang 0.5.23's own ``load_plugins()`` / HookRegistry / EAGLEWorkerV2 decode branch on a
partially patched copy of the installed tree (faked, as in tests/test_patch_runtime.py: only the
draft / verify / re-extend bodies, which need GPU kernels). Case 14 runs the hooks on the fake
controller of tests/test_stepctl.py, whose ``_activate`` is SGLang's own rule (0.5.23
adaptive_runtime_state.py: a missing state raises "Missing adaptive runtime state").
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from conftest import REPO, requires_sglang, subprocess_env
from test_patch_runtime import _link_copy, _tiny_configs
from test_stepctl import FakeController

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.runtime import hold, probes, stepctl
from sglang_eagle3_ext.runtime.plugin import hookplan, overview
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import releases

DRIVER = r'''
import json, shlex, sys, types
import torch
from sglang.srt.plugins import load_plugins
load_plugins()                      # SGLang's own plugin loading: our entry point, its HookRegistry
from sglang.srt.runtime_context import publish
from sglang.srt.server_args import prepare_server_args
target, draft = sys.argv[1], sys.argv[2]
sa = prepare_server_args(shlex.split(
    f"--model-path {target} --speculative-algorithm EAGLE3 --speculative-draft-model-path {draft} "
    "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3 --device cpu"))
sa.resolve_once()
publish(sa, role="scheduler")
from sglang.srt.speculative import eagle_worker_v2 as ew
from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.plugin import procstate
class VI:
    kv_loc_plan = None
    def is_verify_input(self): return True
ew.EagleDraftWorker.draft = lambda self, batch, *, with_topology=False: VI()
ew.EagleDraftWorker._draft_extend_for_decode = lambda self, batch, out, *, kv_loc_plan=None: None
ew.run_eagle_verify = lambda batch, **kw: types.SimpleNamespace(new_seq_lens=batch.seq_lens + 1,
    can_run_cuda_graph=False, speculative_num_draft_tokens=kw.get("num_draft_tokens"))
dw = object.__new__(ew.EagleDraftWorker)
dw.parallel_layout = types.SimpleNamespace(tp_group=None, disable_cp=False); dw.draft_runner = None
w = object.__new__(ew.EAGLEWorkerV2)
w._draft_worker, w._target_worker, w.adaptive_controller = dw, None, None
w.speculative_num_steps, w.topk, w.speculative_num_draft_tokens = 2, 1, 3
for a in ("req_to_token_pool", "token_to_kv_pool_allocator", "plan_stream", "plan_stream_ctx", "device"):
    setattr(w, a, None)
mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
for i in range(3):
    batch = types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, seq_lens=torch.tensor([5, 7]),
                                  spec_info=types.SimpleNamespace(is_verify_input=lambda: False))
    w.forward_batch_generation(batch)
    w.on_verify_complete_cpu([2, 1], batch_size=2)
rec = probes.flush()
print("RESULT " + json.dumps({"file": ew.__file__, "cycles": rec["cycles"] if rec else 0,
      "requests": rec["requests"] if rec else 0, "accepted": rec["accepted_drafts"] if rec else 0,
      "route": rec["route"] if rec else None, "registered": [h.role for h in procstate._S.registered],
      "notes": procstate._S.notes}))
'''


@pytest.fixture()
def accept_only_tree(tmp_path):
    """A copy of the installed 0.5.23 after `patch apply --only accept-v2-hook --aux-layers off`."""
    installed = locate()
    root = tmp_path / "site"
    _link_copy(installed.package_dir, root / "sglang", copied=("srt/speculative/", "srt/managers/"))
    for meta in installed.package_dir.parent.glob("sglang-*.dist-info"):
        _link_copy(meta, root / meta.name)
    rc = cli.main(["patch", "apply", "--only", "accept-v2-hook", "--aux-layers", "off", "--sglang-root", str(root)])
    assert rc == 0
    return root


def test_34_13_coverage_and_route_of_every_mix(accept_only_tree, tmp_path):
    from sglang_eagle3_ext.runtime import routes

    env = locate(accept_only_tree)
    cov = routes.source_coverage(env)
    assert cov["roles"] == ["accept"] and len(cov["files"]) == 1
    d = routes.probe_route(cov, plugin_ok=True)
    assert d["route"] == "plugin+source-patch" and d["plugin_roles"] == {"cycle", "draft", "verify", "extend"}
    plan = hookplan.plan_hooks(env, profile=True, aux=False, nccl_preset=False, probe_roles=d["plugin_roles"])
    assert {h.role for h in plan.hooks} == {"cycle", "draft", "verify", "extend"}  # no second accept recorder
    # no plugin (a release before 0.5.11): said, not silent
    none = routes.probe_route(cov, plugin_ok=False)
    assert none["route"] == "none" and "profiling cannot record" in none["problem"] and "accept counts only" in none["problem"]
    # the whole patch: the source route alone, as before
    engine.revert(env)
    assert cli.main(["patch", "apply", "--aux-layers", "off", "--sglang-root", str(accept_only_tree)]) == 0
    cov = routes.source_coverage(env)
    assert cov["roles"] == ["accept", "cycle"] and routes.probe_route(cov, True)["route"] == "source-patch"


def test_34_13_doctor_says_which_route_records(accept_only_tree, capsys, monkeypatch):
    monkeypatch.setenv("EAGLE3_PROFILE", "1")
    info = overview.describe(locate(accept_only_tree))
    assert info["route"] == "plugin+source-patch" and info["source_patch_records"] == ["accept"], info
    assert cli.main(["doctor", "--sglang-root", str(accept_only_tree)]) == 0
    out = capsys.readouterr().out
    assert "probes recorded by: plugin+source-patch" in out and "the plugin times the cycles" in out


def test_34_13_no_plugin_release_says_at_start(tmp_path, monkeypatch, capsys):
    """0.5.3.post2 (no plugin framework) with only accept-v2-scheduler patched: the patched file's import
    block (probes.set_spec_config(route="source-patch")) says in the server log that nothing can
    record, and doctor says why."""
    import shutil

    root = tmp_path / "t"
    shutil.copytree(releases.fetch("0.5.3.post2"), root, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    assert cli.main(["patch", "apply", "--only", "accept-v2-scheduler", "--aux-layers", "off",
                     "--sglang-root", str(root)]) == 0
    capsys.readouterr()
    env = locate(root)
    monkeypatch.setattr("sglang_eagle3_ext.runtime.sglang_env.locate", lambda *a, **k: env)
    monkeypatch.setattr(probes, "_route_checked", [], raising=False)
    probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_MODE": "wall"})
    try:
        probes.set_spec_config(route="source-patch")
        probes.set_spec_config(route="source-patch")  # once per process
    finally:
        probes.reset(environ={})
    err = capsys.readouterr().err
    assert err.count("profiling cannot record") == 1 and "accept counts only" in err, err
    monkeypatch.setenv("EAGLE3_PROFILE", "1")
    assert overview.describe(env)["route"] == "none"
    assert "profiling cannot record" in overview.describe(env)["route_why"]


@requires_sglang
def test_34_13_partial_patch_records_through_the_plugin(accept_only_tree, tmp_path):
    """EAGLE3_PROFILE=1 on the accept-only tree: cycles are timed by the plugin's hooks, accept
    counts come once from the patched on_verify_complete_cpu (was: no cycle by either route)."""
    target, draft = _tiny_configs(tmp_path)
    penv = subprocess_env(extra={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_MODE": "wall", "EAGLE3_PROFILE_EVERY": "1000"})
    for k in ("SGLANG_PLUGINS", "SGLANG_EAGLE3_HOLD", "SGLANG_EAGLE3_POLICY", "SGLANG_EAGLE3_NCCL"):
        penv.pop(k, None)
    penv["PYTHONPATH"] = os.pathsep.join([str(accept_only_tree), str(REPO), penv["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(target), str(draft)], env=penv, capture_output=True,
                          text=True, timeout=240, cwd=tmp_path)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["file"].startswith(str(accept_only_tree))  # the patched copy ran
    assert r["cycles"] == 3 and r["requests"] == 6 and r["accepted"] == 9, r  # counted once, not twice
    assert r["route"] == "plugin+source-patch" and "accept" not in r["registered"], r
    assert any("the plugin times the cycles" in n for n in r["notes"]), r


# ------------------------------------------------------------------ case 14: a held state gone


def test_34_14_a_held_step_without_state_is_logged_once_and_fails_loud_like_sglang(monkeypatch, caplog):
    """SGLang's own rule raises for a step count whose state was never built (its test
    test_missing_state_fails_loud); under the hold that step was skipped silently (hold.py kept the
    current one). Now: logged once (every rank runs the same schedule on the same states, so every
    rank logs it at the same cycle), the decider hands back to SGLang's rule, and SGLang's own
    _activate fails loud where its choice has no state."""
    class Ctrl(FakeController):
        def _activate(self, steps: int) -> None:  # 0.5.23 AdaptiveController._activate
            if steps not in self._states:
                raise ValueError(f"Missing adaptive runtime state for steps={steps}")
            super()._activate(steps)

        def activate_step_by_batch(self, batch_size: int) -> None:  # SGLang's rule: its tier picks 1
            if 1 != self.worker.speculative_num_steps:
                self._activate(1)

    ctrl = Ctrl()
    monkeypatch.setenv("SGLANG_EAGLE3_HOLD", "1")
    stepctl.init_hook("hold", list)(lambda self, *a, **k: None, ctrl)
    cands = stepctl.installed().candidates
    sched = [hold.slot(i, 1, cands, 1)[1] for i in range(4 * len(cands))]
    k = sched.index(1)  # the first cycle the schedule holds 1 step
    del ctrl._states[1]  # the state of a scheduled step is gone (SGLang's test removes one)
    caplog.set_level(logging.ERROR, logger="sglang_eagle3_ext.plugin")
    stepctl._warned.clear()
    ran = []
    with pytest.raises(ValueError, match="Missing adaptive runtime state for steps=1"):
        for _ in range(k + 1):
            stepctl.activate_hook(Ctrl.activate_step_by_batch, ctrl, 1)
            ran.append(ctrl.worker.speculative_num_steps)
    assert ran == sched[:k]
    msgs = [r.getMessage() for r in caplog.records if "has no runtime state" in r.getMessage()]
    assert len(msgs) == 1 and "steps 1" in msgs[0] and "SGLang's own rule decides" in msgs[0], caplog.text
    assert stepctl.installed() is None
