"""Trees beside chains in one server: state keys, sizing for the largest state, refusals, the hold
schedule over keys, and the SGLang-facing hooks (runtime/specstate.py, runtime/treeswitch.py).

Real: SGLang 0.5.16 / 0.5.23 source (every hook target checked with ast), SGLang 0.5.23's
``load_plugins()`` + ``HookRegistry`` applying the tree hooks to its real classes and functions,
its real ``AdaptiveController`` / ``AdaptiveSpeculativeParams``. Faked (GPU objects only): the
worker's attention backends and graph runners are plain markers, ``build_adaptive_runtime_state``
returns a marker state, and the draft input's candidate tensors are CPU tensors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from conftest import REPO, requires_sglang, subprocess_env

from sglang_eagle3_ext.runtime import hold, settings, specstate, stepctl, treeswitch
from sglang_eagle3_ext.runtime.plugin import hookplan
from sglang_eagle3_ext.runtime.sglang_env import SGLangEnv

# ------------------------------------------------------------------------------------------------
# keys


def test_state_keys_spell_chains_as_steps_and_trees_as_labels():
    assert specstate.parse("5") == specstate.State(5, 1, 6) and specstate.parse(5).key == 5
    t = specstate.parse("5x4x21")
    assert (t.steps, t.topk, t.tokens, t.key, t.is_tree) == (5, 4, 21, "5x4x21", True)
    assert specstate.parse("5x1x6").key == 5  # a topk-1 tree spelling is the chain
    assert specstate.sort_keys([5, "5x4x21", 3, "3x4x8", 0]) == [0, 3, 5, "3x4x8", "5x4x21"]
    assert specstate.parse(0).key == 0  # SGLang's 0-step state


@pytest.mark.parametrize("bad, why", [
    ("5x4x99", "draft tokens must be"), ("2x2x9", "draft at most 6"), ("0x4x3", "at least 1 step"),
    ("5x1x9", "verifies 6 tokens"), ("5x40x9", "topk must be"), ("abc", "STEPSxTOPKxTOKENS"),
])
def test_a_state_sglang_cannot_run_is_refused_with_the_reason(bad, why):
    with pytest.raises(ValueError, match=why):
        specstate.parse(bad)


def test_tree_lists_with_batch_ranges_round_trip():
    specs = specstate.parse_trees("5x4x21@1-16, 3x4x8@1-4;2x2x4")
    assert [(t.state.label, t.lo, t.hi) for t in specs] == [("5x4x21", 1, 16), ("3x4x8", 1, 4),
                                                            ("2x2x4", 1, specstate.ANY_BS)]
    assert specstate.parse_trees(specstate.format_trees(specs)) == specs
    for bad, why in (("5@1-4", "a tree has topk > 1"), ("3x4x8,3x4x8", "listed twice"),
                     ("3x4x8@4-1", "1 <= N <= M"), ("3x4x8@a-b", "not N-M")):
        with pytest.raises(ValueError, match=why):
            specstate.parse_trees(bad)


def test_graph_sizes_are_the_captured_sizes_inside_the_range():
    t = specstate.parse_trees("5x4x21@1-6")[0]
    assert specstate.graph_sizes(t, [1, 2, 4, 8, 16]) == [1, 2, 4]
    assert specstate.graph_sizes(t, None) is None  # graphs off
    with pytest.raises(ValueError, match="no captured CUDA-graph batch size"):
        specstate.graph_sizes(specstate.parse_trees("5x4x21@3-3")[0], [1, 2, 4])


def test_the_envelope_is_the_max_over_every_held_state():
    """What SGLang sizes once from the launch chain (reference: the allocation sizing of 0.5.16 /
    0.5.23, max(topk x steps, draft tokens) per decode at page 1) must hold the largest tree."""
    env = specstate.envelope([specstate.parse(5), specstate.parse("5x4x21"), specstate.parse("8x4x16")])
    assert env == specstate.Envelope(max_topk=4, max_tokens=21, alloc_per_decode=32, draft_slots=32)


def test_settings_read_tree_keys_and_tree_lists():
    assert settings.HOLD_STEPS.read({"SGLANG_EAGLE3_HOLD_STEPS": "5,3x4x8,0"}) == ((5, "3x4x8", 0), None)
    _, problem = settings.HOLD_STEPS.read({"SGLANG_EAGLE3_HOLD_STEPS": "5,3x4x99"})
    assert problem and "STEPSxTOPKxTOKENS" in problem
    assert settings.TREES.read({"SGLANG_EAGLE3_TREES": "3x4x8@1-4"})[0] == "3x4x8@1-4"
    _, problem = settings.TREES.read({"SGLANG_EAGLE3_TREES": "3x4x8@0-4"})
    assert problem and "1 <= N <= M" in problem


def test_trees_without_a_decider_are_refused():
    trees, why = treeswitch.requested({"SGLANG_EAGLE3_TREES": "3x4x8@1-4"})
    assert len(trees) == 1 and "needs a decider" in why
    _, why = treeswitch.requested({"SGLANG_EAGLE3_TREES": "3x4x8", "SGLANG_EAGLE3_HOLD": "8",
                                   "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1"})
    assert "SKIP_ZERO_STEP" in why
    assert treeswitch.requested({"SGLANG_EAGLE3_TREES": "3x4x8", "SGLANG_EAGLE3_HOLD": "8"})[1] is None

# ------------------------------------------------------------------------------------------------
# the hold schedule and stepctl over keys


def test_hold_holds_trees_only_at_the_levels_they_have_graphs_for():
    info = stepctl.ControllerInfo(built=(3, 5, "3x4x8"), cuda_graph_bs=(1, 2, 4, 8),
                                  tree_ranges={"3x4x8": (1, 4)})
    d = hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "2"})
    assert d.candidates == (5, 3, "3x4x8")
    at4 = {d.choose(3, 5, info.built) for _ in range(60)}
    at8 = {d.choose(7, 5, info.built) for _ in range(60)}
    assert at4 == {3, 5, "3x4x8"} and at8 == {3, 5}


def test_pending_tags_verify_results_by_key_not_by_steps():
    """Chain 3 and tree 3x4x8 both have 3 steps: under overlap the result of the previous cycle
    must be credited to the state that ran it."""
    p = stepctl.Pending()
    p.push(4, 3)
    p.push(4, "3x4x8")
    assert p.take(4) == 3 and p.take(4) == "3x4x8" and p.take(4) is None


def test_current_key_reads_topk_from_the_worker():
    w = types.SimpleNamespace(speculative_num_steps=3, topk=4, speculative_num_draft_tokens=8)
    assert stepctl.current_key(w) == "3x4x8"
    w.topk, w.speculative_num_draft_tokens = 1, 4
    assert stepctl.current_key(w) == 3

# ------------------------------------------------------------------------------------------------
# the hooks on stand-in workers (GPU objects are markers)


class _DW:
    def __init__(self):
        self.topk, self.speculative_num_steps, self.speculative_num_draft_tokens = 1, 5, 6
        self.draft_attn_backend = self.cuda_graph_runner = "c5-draft"
        self.draft_extend_attn_backend = self.cuda_graph_runner_for_draft_extend = "c5-extend"
        self.draft_runner = types.SimpleNamespace(draft_attn_backend="c5-draft", attn_backend="c5-extend")
        self.rebuilds = []

    def _rebuild_topk1_chain_buffers(self):
        if self.topk != 1:
            return
        assert self.speculative_num_draft_tokens == self.speculative_num_steps + 1
        self.rebuilds.append(self.speculative_num_steps)


class _Worker:
    def __init__(self):
        self.topk, self.speculative_num_steps, self.speculative_num_draft_tokens = 1, 5, 6
        self._draft_worker = _DW()
        self._target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
            attn_backend="c5-target", decode_cuda_graph_runner="c5-verify"))
        self.spec = []


def _rs(steps, n, tag, topk=1):
    rs = types.SimpleNamespace(speculative_num_steps=steps, speculative_num_draft_tokens=n,
                               draft_attn_backend=f"{tag}-draft", cuda_graph_runner=f"{tag}-draft",
                               draft_extend_attn_backend=f"{tag}-extend",
                               cuda_graph_runner_for_draft_extend=f"{tag}-extend",
                               target_attn_backend=f"{tag}-target", target_graph_runner=f"{tag}-verify")
    if topk > 1:
        rs._eagle3_topk = topk
    return rs


def test_a_switch_that_involves_a_tree_swaps_topk_and_every_resource(monkeypatch):
    monkeypatch.setattr(treeswitch, "set_spec_state", lambda w, st, src: w.spec.append(st))
    w = _Worker()
    chain_calls = []
    orig = lambda self, st: chain_calls.append(st.speculative_num_steps)  # noqa: E731 - SGLang's chain switch
    treeswitch.apply_hook(orig, w, _rs(5, 21, "t", topk=4))  # chain 5 -> tree 5x4x21: same steps
    dw, mr = w._draft_worker, w._target_worker.model_runner
    assert (w.topk, dw.topk, w.speculative_num_steps, w.speculative_num_draft_tokens) == (4, 4, 5, 21)
    assert (dw.cuda_graph_runner, dw.draft_runner.attn_backend, mr.decode_cuda_graph_runner) == \
        ("t-draft", "t-extend", "t-verify")
    assert w.spec == [specstate.State(5, 4, 21)] and not chain_calls and dw.rebuilds == []
    treeswitch.apply_hook(orig, w, _rs(3, 4, "c3"))  # tree -> chain 3: topk 1 and chain buffers rebuilt
    assert (w.topk, dw.topk, w.speculative_num_steps, dw.rebuilds) == (1, 1, 3, [3])
    assert w.spec[-1] == specstate.State(3, 1, 4) and mr.attn_backend == "c3-target"
    treeswitch.apply_hook(orig, w, _rs(5, 6, "c5"))  # chain -> chain: SGLang's own switch
    assert chain_calls == [5]


def test_a_tree_is_built_with_its_topk_and_the_live_state_is_left_alone(monkeypatch):
    import contextlib

    seen = []
    monkeypatch.setattr(treeswitch, "set_spec_topk", lambda w, k, src: seen.append(("spec", k)))

    @contextlib.contextmanager
    def sglang_override(self, steps, n, cuda_graph_bs=None):
        seen.append(("enter", self.topk, self._draft_worker.topk, steps, n, cuda_graph_bs))
        self._draft_worker._rebuild_topk1_chain_buffers()  # SGLang's own enter: a no-op at topk > 1
        yield

    w = _Worker()
    w._eagle3_build_topk = 4
    with treeswitch.override_hook(sglang_override, w, 5, 21, cuda_graph_bs=[1, 2]):
        pass
    assert seen == [("spec", 4), ("enter", 4, 4, 5, 21, [1, 2]), ("spec", 1)]
    assert (w.topk, w._draft_worker.topk, w._draft_worker.rebuilds) == (1, 1, [])
    w._eagle3_build_topk = None  # a chain build: SGLang's own, untouched
    assert treeswitch.override_hook(lambda self, *a, **k: "cm", w, 3, 4) == "cm"


def test_build_trees_registers_labels_with_pruned_graph_sizes():
    treeswitch.configure(specstate.parse_trees("3x4x8@1-4,5x2x11"))
    try:
        built = []

        class W(_Worker):
            def build_adaptive_runtime_state(self, s, n, cuda_graph_bs=None):
                built.append((self._eagle3_build_topk, s, n, cuda_graph_bs))
                return _rs(s, n, "x")

        ctrl = types.SimpleNamespace(worker=W(), _states={3: _rs(3, 4, "c3"), 5: _rs(5, 6, "c5")},
                                     params=types.SimpleNamespace(_cuda_graph_bs=[1, 2, 4, 8]))
        assert treeswitch.build_trees(ctrl) == ["3x4x8", "5x2x11"]
        assert built == [(4, 3, 8, [1, 2, 4]), (2, 5, 11, [1, 2, 4, 8])]
        assert treeswitch.state_of(ctrl._states["3x4x8"]) == specstate.State(3, 4, 8)
        info = stepctl.controller_info(ctrl)
        assert info.built == (3, 5, "3x4x8", "5x2x11") and info.tree_ranges["3x4x8"] == (1, 4)
        assert not info.eligible(8, "3x4x8") and info.eligible(8, "5x2x11") and info.eligible(8, 3)
    finally:
        treeswitch.configure([])


@requires_sglang
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # SGLang's import on CPU
def test_the_carried_candidates_are_k_max_wide_and_each_draft_takes_its_topk():
    """SGLang 0.5.23's real ``EagleDraftInput`` carrying top-4 candidates: a chain cycle drafts from
    the first column, a 2-wide tree from the first two (sorted: exactly its top-k); the draft
    extend runs with topk = K_max whatever the cycle's state."""
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    treeswitch.configure(specstate.parse_trees("3x4x8,2x2x4"))
    try:
        p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.9, 0.05, 0.03, 0.02]])
        idx = torch.tensor([[7, 3, 9, 1], [2, 8, 4, 6]])
        si = EagleDraftInput(topk_p=p.clone(), topk_index=idx.clone(), hidden_states=torch.zeros(2, 4))
        seen = []
        draft = lambda self, batch: seen.append(tuple(batch.spec_info.topk_index.shape))  # noqa: E731
        worker = types.SimpleNamespace(topk=1)
        treeswitch.draft_hook(draft, worker, types.SimpleNamespace(spec_info=si))
        assert seen == [(2, 1)] and si.topk_index[:, 0].tolist() == [7, 2]
        si2 = EagleDraftInput(topk_p=p.clone(), topk_index=idx.clone(), hidden_states=torch.zeros(2, 4))
        worker.topk = 2
        treeswitch.draft_hook(draft, worker, types.SimpleNamespace(spec_info=si2))
        assert seen[-1] == (2, 2) and si2.topk_index.tolist() == [[7, 3], [2, 8]]
        widths = []
        treeswitch.extend_hook(lambda self: widths.append(self.topk), worker)
        assert widths == [4] and worker.topk == 2  # put back after the extend
    finally:
        treeswitch.configure([])

# ------------------------------------------------------------------------------------------------
# the release sources: every target exists where we hook it


@pytest.mark.parametrize("release_root", ["0.5.16", "0.5.23"], indirect=True)
def test_every_tree_hook_target_exists_in_the_release(release_root):
    version = release_root.name
    env = SGLangEnv(package_dir=release_root / "sglang", version=version, source="release")
    plan = hookplan.plan_hooks(env, profile=False, aux=False, nccl_preset=False, trees="scheduler")
    assert not plan.problems, plan.problems
    roles = {h.role for h in plan.hooks}
    assert {"max-tokens", "alloc", "headroom", "reserve", "logits", "override", "apply", "draft",
            "extend-prefill", "extend-decode"} - roles == ({"max-tokens"} if version == "0.5.16" else set())
    launcher = hookplan.plan_hooks(env, profile=False, aux=False, nccl_preset=False, trees="launcher")
    assert {h.role for h in launcher.hooks} <= treeswitch.LAUNCHER_ROLES and launcher.hooks


@pytest.mark.parametrize("release_root", ["0.5.13"], indirect=True)
def test_a_release_without_the_targets_gets_no_tree_hook_and_says_why(release_root):
    """0.5.13: adaptive chains, but before the tree targets this follows."""
    env = SGLangEnv(package_dir=release_root / "sglang", version="0.5.13", source="release")
    plan = hookplan.plan_hooks(env, profile=False, aux=False, nccl_preset=False, trees="scheduler")
    assert not plan.hooks or all(h.family != "trees" for h in plan.hooks)
    assert any(p.startswith("trees: SGLang 0.5.13 lacks") for p in plan.problems), plan.problems

# ------------------------------------------------------------------------------------------------
# SGLang 0.5.23 for real: load_plugins, HookRegistry, AdaptiveController

CHILD = r'''
import json, os, tempfile, types
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
from sglang.srt.mem_cache import allocation_sizing
from sglang_eagle3_ext.runtime import stepctl
from sglang_eagle3_ext.runtime.plugin import procstate

class Worker:
    speculative_num_steps, speculative_num_draft_tokens, topk = 5, 6, 1
    _eagle3_build_topk = None
    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        return types.SimpleNamespace(speculative_num_steps=speculative_num_steps, topk=self._eagle3_build_topk,
                                     speculative_num_draft_tokens=speculative_num_draft_tokens, bs=cuda_graph_bs)
    def apply_runtime_state(self, state):
        self.speculative_num_steps = state.speculative_num_steps
        self.speculative_num_draft_tokens = state.speculative_num_draft_tokens
        self.topk = getattr(state, "_eagle3_topk", 1)

cfg = os.path.join(tempfile.mkdtemp(), "adaptive.json")
json.dump({"1": {"candidate_steps": [3, 5]}}, open(cfg, "w"))
R = {"trees": sorted(h.role for h in procstate._S.registered if h.family == "trees"),
     "patched": sorted(t for t in HookRegistry._patched if "allocation_sizing" in t or "eagle_worker_v2" in t),
     "alloc_wrapped": hasattr(allocation_sizing.get_alloc_len_per_decode, "__wrapped__")}
w = Worker()
ctrl = AdaptiveController(w, AdaptiveSpeculativeParams(initial_steps=5, cfg_path=cfg))
ctrl.init_states(cuda_graph_bs=[1, 2, 4, 8])
R["states"] = sorted(map(str, ctrl._states))
R["tree_build"] = [ctrl._states["3x4x8"].topk, ctrl._states["3x4x8"].bs]
R["candidates"] = [str(c) for c in stepctl.installed().candidates]
ran = {4: set(), 8: set()}
for bs in (3, 7):
    for i in range(80):
        ctrl.activate_step_by_batch(bs)
        ran[4 if bs == 3 else 8].add(str(stepctl.current_key(w)))
R["ran"] = {k: sorted(v) for k, v in ran.items()}
print("RESULT " + json.dumps(R))
'''


@requires_sglang
def test_real_plugin_builds_trees_beside_the_chains_and_holds_them():
    env = subprocess_env(extra={"SGLANG_EAGLE3_HOLD": "4", "SGLANG_EAGLE3_TREES": "3x4x8@1-4"})
    r = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=240)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(line[7:])
    assert res["trees"] == sorted(["alloc", "apply", "draft", "extend-decode", "extend-prefill", "headroom",
                                   "logits", "max-tokens", "override", "reserve"]), res
    assert res["alloc_wrapped"]
    assert res["states"] == ["3", "3x4x8", "5"]
    assert res["tree_build"] == [4, [1, 2, 4]]  # built with topk 4, graphs only inside 1-4
    assert set(res["candidates"]) == {"3", "5", "3x4x8"}
    assert res["ran"] == {"4": ["3", "3x4x8", "5"], "8": ["3", "5"]}


def test_an_exported_tree_list_is_refused_by_server_start(tmp_path):
    """A stray SGLANG_EAGLE3_TREES would build trees in every server of the shell: refused before
    anything spawns (serve/stepenv.py), like the step-control variables."""
    from sglang_eagle3_ext.runtime.errors import UserError
    from sglang_eagle3_ext.serve import server
    from sglang_eagle3_ext.serve.launch_config import LaunchConfig

    cfg = LaunchConfig(model=str(tmp_path), no_spec=True, log=str(tmp_path / "s.log"), port=39871)
    with pytest.raises(UserError, match="SGLANG_EAGLE3_TREES set in this shell") as ei:
        server.Server(cfg, environ={"SGLANG_EAGLE3_TREES": "3x4x8@1-4"}).start(wait=False)
    assert ei.value.exit_code == 2 and "--trees" in str(ei.value)
    assert not (tmp_path / "s.log").exists()


def test_spec_settings_are_written_where_the_release_writes_them(monkeypatch):
    """0.5.23's worker module imports get_context (the spec bag); 0.5.16's worker writes through
    self.server_args.override (its runtime_context has a get_context of another shape)."""
    calls = []
    bag = types.SimpleNamespace(override=lambda src, **f: calls.append(("bag", src, f)))
    mod = types.ModuleType("fake_worker_0523")
    mod.get_context = lambda: bag
    monkeypatch.setitem(sys.modules, "fake_worker_0523", mod)
    W = type("W", (), {"__module__": "fake_worker_0523"})
    treeswitch.set_spec_topk(W(), 4, "t")
    old = type("Old", (), {})()
    old.server_args = types.SimpleNamespace(override=lambda src, **f: calls.append(("args", src, f)))
    treeswitch.set_spec_state(old, specstate.State(3, 4, 8), "s")
    assert calls == [("bag", "t", {"speculative_eagle_topk": 4}),
                     ("args", "s", {"speculative_num_steps": 3, "speculative_num_draft_tokens": 8,
                                    "speculative_eagle_topk": 4})]
