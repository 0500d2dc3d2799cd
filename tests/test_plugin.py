"""The `sglang.srt.plugins` entry point: inert unless asked, hooks derived from each release,
verified after SGLang applies them, feeding probes from the real 0.5.23 decode branch.

Real: SGLang 0.5.23's own `load_plugins()` / `HookRegistry` / `EAGLEWorkerV2.forward_batch_generation`
/ `configure_aux_hidden_state_capture` / `initialize_model_parallel` (gloo, world size 1), and the
source of every pinned release. Stand-ins (GPU work only): the bodies of `EagleDraftWorker.draft`,
`EagleDraftWorker._draft_extend_for_decode`, `run_eagle_verify` and the prefill path, plus a
target model class whose `set_eagle3_layers_to_capture` records its ids (no weights on CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from conftest import REPO, requires_sglang, subprocess_env

from sglang_eagle3_ext.runtime import plugin, probes, sglang_env
from sglang_eagle3_ext.runtime.plugin import hookplan, overview, procstate, wrappers
from sglang_eagle3_ext.serve import releases

OUR_ENV = ("EAGLE3_PROFILE", "EAGLE3_PROFILE_TRACE", "SGLANG_EAGLE3_NCCL", "SGLANG_EAGLE3_AUX_LAYERS",
           "SGLANG_PLUGINS", "NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")

# Child process with every switch on: SGLang's load_plugins() must find and run our entry point.
ENABLED = r'''
import json, os, shlex, sys, tempfile, types
import torch
from transformers import LlamaConfig
from sglang.srt.speculative import eagle_worker_v2 as ew

order = []
class VerifyInput:
    kv_loc_plan = None
    def is_verify_input(self): return True
# Stand-ins for the GPU bodies; the hooks wrap whatever sits at the target when SGLang applies them.
def draft(self, batch, *, with_topology=False): order.append("draft"); return VerifyInput()
def extend(self, batch, out, *, kv_loc_plan=None): order.append("extend")
ew.EagleDraftWorker.draft = draft
ew.EagleDraftWorker._draft_extend_for_decode = extend
ew.run_eagle_verify = lambda batch, **kw: (order.append("verify"), types.SimpleNamespace(new_seq_lens=batch.seq_lens + 1))[1]

from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
load_plugins()
from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.plugin import apply_check, hookplan, overview, procstate
R = {"patched": sorted(HookRegistry._patched), "registered": [h.target for h in procstate._S.registered],
     "missing": procstate._S.missing, "role": procstate._S.role,
     "nccl": {k: os.environ.get(k) for k in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")}}

# Tree hooks (issue 24): the names the worker code looks up in its own module globals.
from sglang.srt.speculative import eagle_worker_common as ewc
from sglang_eagle3_ext.runtime.probes import tree as ptree
def ours(fn, hook):
    return hasattr(fn, "__wrapped__") and hook in [c.cell_contents for c in (fn.__closure__ or ())]
bvi = ew.__dict__["build_eagle_verify_input"]            # what EAGLEWorkerV2's call resolves
es = ewc.run_eagle_verify.__globals__["eagle_sample"]    # what run_eagle_verify's call resolves
R["tree_hooked"] = [ours(bvi, ptree.around_build_verify_input), ours(es, ptree.around_eagle_sample),
                    bvi.__wrapped__ is ewc.build_eagle_verify_input.__wrapped__]
try:  # a call made as the worker makes it reaches our hook first (the real body then fails: no GPU tensors)
    bvi(None, None, "PARENT", "TSI")
except Exception:
    pass
R["tree_layout"], ptree._State.layout = ptree._State.layout, None

d = tempfile.mkdtemp()
common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
LlamaConfig(num_hidden_layers=4, architectures=["LlamaForCausalLM"], **common).save_pretrained(d + "/t")
LlamaConfig(num_hidden_layers=1, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=512, **common).save_pretrained(d + "/d")
from sglang.srt.server_args import prepare_server_args
from sglang.srt.runtime_context import publish
sa = prepare_server_args(shlex.split(f"--model-path {d}/t --speculative-algorithm EAGLE3 --speculative-draft-model-path {d}/d "
    "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3 --device cpu"))
sa.resolve_once(); publish(sa, role="scheduler")

dw = object.__new__(ew.EagleDraftWorker)
dw.parallel_layout = types.SimpleNamespace(tp_group=None, disable_cp=False); dw.draft_runner = None
w = object.__new__(ew.EAGLEWorkerV2)
w._draft_worker, w._target_worker, w.adaptive_controller = dw, None, None
for a in ("req_to_token_pool", "token_to_kv_pool_allocator", "plan_stream", "plan_stream_ctx", "device"):
    setattr(w, a, None)
w.speculative_num_steps, w.topk, w.speculative_num_draft_tokens = 2, 1, 3
w._forward_prefill_batch = lambda *a, **k: order.append("prefill")
def batch(extend=False, idle=False):
    mode = types.SimpleNamespace(is_extend=lambda: extend, is_idle=lambda: idle)
    return types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, seq_lens=torch.tensor([5, 7]),
                                 spec_info=types.SimpleNamespace(is_verify_input=lambda: False))
probes.reset()
w.forward_batch_generation(batch())                 # decode: one cycle
w.on_verify_complete_cpu([2, 1], batch_size=2)      # the scheduler's CPU accept counts
w.forward_batch_generation(batch(extend=True))      # prefill: no cycle
w.forward_batch_generation(batch(idle=True))        # DP idle decode: runs, not a cycle
R["order"], R["trace"] = order, list(probes.trace)

from sglang.srt.model_executor.model_runner_components import attention_backend_setup as setup
class LlamaForCausalLM(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.config = types.SimpleNamespace(num_hidden_layers=4); self.got = None
    def set_eagle3_layers_to_capture(self, layer_ids=None): self.got = layer_ids
m = LlamaForCausalLM()
setup.configure_aux_hidden_state_capture(model=m, eagle_use_aux_hidden_state=True, eagle_aux_hidden_state_layer_ids=[1, 2, 3],
    dflash_use_aux_hidden_state=False, dflash_target_layer_ids=None, is_dspark=False)
R["aux"] = {"got": m.got, "left_wrapper": "set_eagle3_layers_to_capture" in m.__dict__}

from sglang.srt.distributed import parallel_state as ps
ps.init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                                distributed_init_method="tcp://127.0.0.1:%d" % (29500 + os.getpid() % 500))
ps.initialize_model_parallel()
R["allreduce"] = procstate._S.allreduce

bogus = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.no_such_method"
HookRegistry.register(bogus, lambda original, *a, **k: original(*a, **k), HookType.AROUND)
procstate._S.registered.append(hookplan.Hook("verify", "v2", bogus))
HookRegistry.apply_hooks()
R["missing_after_bogus"] = apply_check.verify()
R["describe"] = overview.describe()
print("RESULT " + json.dumps(R, default=str))
'''

# Child process with no switch: the entry point is loaded and runs, and changes nothing.
INERT = r'''
import json, os, sys
import importlib.metadata as md
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
before = dict(os.environ)
load_plugins()
R = {"eps": sorted(ep.value for ep in md.entry_points(group="sglang.srt.plugins")),
     "loaded": "sglang_eagle3_ext.runtime.plugin" in sys.modules,
     "hooks": sorted(HookRegistry._hooks), "patched": sorted(HookRegistry._patched),
     "env_changed": sorted(set(os.environ.items()) ^ set(before.items()))}
from sglang_eagle3_ext.runtime.plugin import procstate
R["role"] = procstate._S.role
print("RESULT " + json.dumps(R))
'''


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = subprocess_env(extra=None)
    for k in OUR_ENV:
        env.pop(k, None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def children() -> dict[str, tuple[dict, str]]:
    """Both SGLang-importing children at once (each import is 8-16 s; 2 cores)."""
    runs = {
        "enabled": (ENABLED, {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_TRACE": "1", "EAGLE3_PROFILE_MODE": "wall",
                              "SGLANG_EAGLE3_NCCL": "tuned", "SGLANG_EAGLE3_AUX_LAYERS": "0,1,2",
                              "NCCL_ALGO": "Tree"}),
        "inert": (INERT, {}),
    }
    procs = {name: subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=_clean_env(extra),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (code, extra) in runs.items()}
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=240)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert p.returncode == 0 and lines, f"{name} child failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
        out[name] = (json.loads(lines[-1][len("RESULT "):]), stderr)
    return out


V2 = "sglang.srt.speculative.eagle_worker_v2."
EXPECTED_0523 = {
    V2 + "EAGLEWorkerV2.forward_batch_generation", V2 + "EagleDraftWorker.draft", V2 + "EAGLEWorkerV2.verify",
    V2 + "EagleDraftWorker._draft_extend_for_decode", V2 + "EAGLEWorkerV2.on_verify_complete_cpu",
    V2 + "build_eagle_verify_input", "sglang.srt.speculative.eagle_worker_common.eagle_sample",  # tree
    "sglang.srt.model_executor.model_runner_components.attention_backend_setup.configure_aux_hidden_state_capture",
    "sglang.srt.distributed.parallel_state.initialize_model_parallel",
}


@requires_sglang
@pytest.mark.sglang
def test_load_plugins_runs_us_and_every_requested_hook_is_applied(children):
    r, log = children["enabled"]
    assert set(r["registered"]) == EXPECTED_0523
    assert EXPECTED_0523 <= set(r["patched"]) and r["missing"] == []
    assert r["role"] == "other"  # not under run_scheduler_process here; hooks are still installed
    assert "all 9 requested hook(s) applied" in log
    # NCCL: applied where unset, the user's NCCL_ALGO kept, effective env logged
    assert r["nccl"] == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree", "NCCL_P2P_LEVEL": "SYS"}
    assert "kept NCCL_ALGO=Tree (set before the preset; preset wants Ring)" in log
    assert "effective NCCL env: NCCL_ALGO=Tree NCCL_P2P_LEVEL=SYS NCCL_PROTO=LL" in log
    assert r["allreduce"] == "none (TP 1)" and "TP size 1: no tensor-parallel all-reduce" in log


@requires_sglang
@pytest.mark.sglang
def test_tree_hooks_sit_where_the_worker_looks_them_up(children):
    """Real 0.5.23 HookRegistry: eagle_worker_v2's own build_eagle_verify_input global and
    run_eagle_verify's eagle_sample global are our AROUND wrappers; a call through the worker's
    name reaches our hook (faked: only the tensors, strings here, so the real body then fails)."""
    r, _log = children["enabled"]
    assert r["tree_hooked"] == [True, True, True]
    assert r["tree_layout"] == ["TSI", "PARENT"]


@requires_sglang
@pytest.mark.sglang
def test_real_decode_branch_fires_the_probes_in_order(children):
    r, _ = children["enabled"]
    assert r["order"] == ["draft", "verify", "extend", "prefill", "draft", "verify", "extend"]
    trace = [tuple(t) if not isinstance(t[1], list) else (t[0], tuple(t[1])) for t in r["trace"]]
    assert trace == [
        ("set_spec_config", (2, 1, 3, "plugin")),
        ("cycle_begin", None),
        ("phase_begin", "draft"), ("phase_end", "draft"),
        ("phase_begin", "verify"), ("phase_end", "verify"),
        ("phase_begin", "extend"), ("phase_end", "extend"),
        ("tag_cycle", (2, 1, 3, 2, None, -1)),  # read after the original: steps, topk, draft tokens, bs
        ("cycle_end", None),
        ("record_accept", (2, 1)),  # correct drafts per request, bonus excluded
        ("mark_boundary", "extend"),  # the prefill: a boundary, no cycle
    ]  # the idle batch adds nothing


@requires_sglang
@pytest.mark.sglang
def test_aux_funnel_routes_through_override_and_cleans_up(children):
    r, log = children["enabled"]
    # "0,1,2" = outputs of decoder layers 0..2; Llama in 0.5.23 captures [i + 1 for i in ids] at
    # the input of layer i+1, i.e. config ids [0, 1, 2] (layers.ours_to_config is the rule).
    assert r["aux"] == {"got": [0, 1, 2], "left_wrapper": False}
    assert "EAGLE-3 aux layers = outputs of layers 0, 1, 2" in log


@requires_sglang
@pytest.mark.sglang
def test_a_hook_sglang_could_not_apply_is_named_loudly(children):
    r, log = children["enabled"]
    assert r["missing_after_bogus"] == [V2 + "EAGLEWorkerV2.no_such_method"]
    assert "HOOK NOT APPLIED: " + V2 + "EAGLEWorkerV2.no_such_method" in log
    assert "1 of 10 requested hook(s) missing" in log
    d = r["describe"]
    assert d["route"] == "plugin" and d["entry_point"] is True
    assert d["this_process"]["missing"] == [V2 + "EAGLEWorkerV2.no_such_method"]


@requires_sglang
@pytest.mark.sglang
def test_env_unset_loaded_but_inert(children):
    r, log = children["inert"]
    assert "sglang_eagle3_ext.runtime.plugin:register" in r["eps"] and r["loaded"]
    assert r["hooks"] == [] and r["patched"] == [] and r["env_changed"] == []
    assert r["role"] == "" and "sglang-eagle3-ext" not in log


# ------------------------------------------------------------------------------------------------
# The plan, from every pinned release's source (no import)

def test_plan_follows_each_release(release_root):
    env = sglang_env.locate(release_root)
    plan = hookplan.plan_hooks(env, profile=True, aux=True, nccl_preset=True)
    roles = {(h.family, h.role): h for h in plan.hooks}
    if not env.at_least("0.5.11"):
        assert plan.hooks == [] and "no plugin framework" in plan.problems[0]
        return
    assert plan.problems == []
    cycle = roles[("v2", "cycle")]
    assert cycle.detail == {"rule": "not_extend", "extend_in_batch": "true",
                            "arg": "model_worker_batch" if not env.at_least("0.5.13") else "batch"}
    assert roles[("v2", "accept")].target.endswith("EAGLEWorkerV2.on_verify_complete_cpu")
    has_v1 = env.path(sglang_env.V1_FILE).is_file()
    assert (("v1", "verify") in roles) == has_v1 == (not env.at_least("0.5.13"))
    aux = roles[("aux", "aux")].target
    assert aux.endswith("configure_aux_hidden_state_capture" if env.at_least("0.5.16")
                        else "ModelRunner.init_aux_hidden_state_capture")
    # Each hooked phase method is what the decode entry actually calls in this release.
    text = env.path(sglang_env.V2_FILE).read_text()
    entry = text[text.index("    def forward_batch_generation"):]
    for call in ("self.draft_worker.draft(", "self.verify(", "self.draft_worker._draft_extend_for_decode("):
        assert call in entry


def test_plan_for_0_5_11_uses_the_scheduler_accept_counts():
    env = sglang_env.locate(releases.fetch("0.5.11"))
    plan = hookplan.plan_hooks(env, profile=True, aux=False, nccl_preset=False)
    accept = [h for h in plan.hooks if h.role == "accept"]
    assert [h.target.rsplit(".", 2)[-2:] for h in accept] == [["SchedulerOutputProcessorMixin",
                                                                "_resolve_spec_overlap_token_ids"]]


def test_decode_rule_reads_the_branch_shape():
    import ast

    def rule(src: str):
        return hookplan.decode_rule(ast.parse(src).body[0])

    assert rule("def f(self, b):\n    if b.forward_mode.is_decode():\n        pass\n") == {"rule": "is_decode", "arg": "b"}
    assert rule("def f(self, b):\n    if b.forward_mode.is_extend():\n        pass\n")["extend_in_batch"] == "false"
    assert rule("def f(self, b):\n    if b.mode == 3:\n        pass\n") is None
    # the spec's decode_branch alternatives bound what may match
    assert rule_in("def f(self, b):\n    if b.forward_mode.is_decode():\n        pass\n",
                   ({"else_of": "forward_mode.is_extend"},)) is None
    assert rule_in("def f(self, b):\n    if b.forward_mode.is_extend():\n        pass\n",
                   ({"else_of": "forward_mode.is_extend"},))["rule"] == "not_extend"


def rule_in(src: str, branch):
    import ast

    return hookplan.decode_rule(ast.parse(src).body[0], branch)


# ------------------------------------------------------------------------------------------------
# One probe map (patches/*.yaml) for both routes (issue 18)

FROZEN = json.loads((REPO / "tests" / "data" / "plugin_plan_frozen.json").read_text())["releases"]


def test_plan_compiled_from_the_yaml_equals_the_frozen_plan_of_the_python_planner(release_root):
    """Before the plugin compiled its plan from patches/*.yaml, Python (_plan_v2/_plan_v1) derived
    it; its output per pinned release is frozen in tests/data/plugin_plan_frozen.json. The YAML
    plan must install the same hooks (family, role, target, in order), with the same cycle rule,
    aux style and problems."""
    env = sglang_env.locate(release_root)
    plan = hookplan.plan_hooks(env, profile=True, aux=True, nccl_preset=True)
    frozen = FROZEN[env.version]
    assert [(h.family, h.role, h.target) for h in plan.hooks] == \
        [(h["family"], h["role"], h["target"]) for h in frozen["hooks"]]
    for new, old in zip(plan.hooks, frozen["hooks"], strict=True):
        if new.role in ("cycle", "aux"):
            assert new.detail == old["detail"]
        if new.role == "accept":
            assert new.detail["source"] == old["detail"]["source"]
    assert plan.problems == frozen["problems"] and plan.notes == frozen["notes"]


def test_both_routes_compile_from_the_same_yaml_entries(release_root):
    """Per release: the patcher's own selection picks the entries; every plugin probe hook names
    one of them, the plugin's phases per worker are that entry's anchors, and the accept hook is
    compiled from the accept entry the patcher applies (or, for V1, the decode entry's accept)."""
    from sglang_eagle3_ext.runtime.probemap import load_specs, select

    env = sglang_env.locate(release_root)
    if not env.has_plugins:
        pytest.skip(f"{env.version}: no plugin route")
    chosen = {p.name: p for p in select(load_specs(), env, only=None, options={})}
    plan = hookplan.plan_hooks(env, profile=True, aux=False, nccl_preset=False)
    probes_ = [h for h in plan.hooks if h.role != "accept"]
    assert probes_ and all(h.entry in chosen and chosen[h.entry].kind == "decode-probes" for h in probes_)
    for name in {h.entry for h in probes_}:
        p = chosen[name]
        phases = [h.role for h in probes_ if h.entry == name and h.role != "cycle"]
        assert phases == [a.phase for a in p.anchors]  # same phases, same order
        cycle = next(h for h in probes_ if h.entry == name and h.role == "cycle")
        assert cycle.target.endswith(f"{p.cls}.{cycle.target.rsplit('.', 1)[1]}")
        assert cycle.target.rsplit(".", 1)[1] in p.method
    accept_entries = [p for p in chosen.values() if p.accept_hook]
    accepts = [h for h in plan.hooks if h.role == "accept"]
    assert [h.entry for h in accepts] == [p.name for p in accept_entries] and len(accepts) == 1
    # the patcher's accept insertion and the plugin's accept hook sit in the same method
    entry = accept_entries[0]
    assert accepts[0].target.rsplit(".", 1)[1] in entry.method
    assert accepts[0].target.rsplit(".", 2)[1] == entry.cls
    for h in plan.hooks:  # V1: the accept field both routes read from the verify output
        if h.family == "v1" and h.role == "verify":
            assert h.detail["field"] == chosen[h.entry].accept_field(env.version)


# ------------------------------------------------------------------------------------------------
# In-process: switches, roles, source-patch exclusivity, the hook bodies (no SGLang import)

@pytest.fixture()
def fresh(monkeypatch):
    saved = dict(os.environ)
    monkeypatch.setattr(procstate, "_S", procstate._State())
    for k in OUR_ENV:
        monkeypatch.delenv(k, raising=False)
    yield monkeypatch
    probes.reset(environ={})
    os.environ.clear()  # apply_preset writes os.environ directly
    os.environ.update(saved)


def _small_root(tmp_path, version: str = "0.5.23"):
    """Just the files locate() and the planner read, copied from a real release (fast)."""
    import shutil

    src = releases.fetch(version)
    for rel in [sglang_env.V2_FILE, sglang_env.PLUGINS_FILE, "srt/speculative/base_spec_worker.py"]:
        (tmp_path / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / "sglang" / rel, tmp_path / "sglang" / rel)
    for meta in src.glob("sglang-*.dist-info/METADATA"):
        (tmp_path / meta.parent.name).mkdir()
        shutil.copy(meta, tmp_path / meta.parent.name / "METADATA")
    return sglang_env.locate(tmp_path)


@pytest.fixture()
def traced(fresh):
    probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_TRACE": "1", "EAGLE3_PROFILE_MODE": "wall"})
    return probes.trace


def test_inert_register_changes_nothing(fresh):
    before = dict(os.environ)
    plugin.register()
    assert dict(os.environ) == before and procstate._S.role == ""


def run_detokenizer_process() -> None:  # same name as SGLang's detokenizer entry
    plugin.register()


def test_non_worker_process_gets_nccl_but_no_hooks(fresh):
    fresh.setenv("EAGLE3_PROFILE", "1")
    fresh.setenv("SGLANG_EAGLE3_NCCL", "tuned")
    run_detokenizer_process()
    assert procstate._S.role == "detokenizer" and procstate._S.registered == []
    assert os.environ["NCCL_PROTO"] == "LL"


def test_unknown_preset_in_a_server_process_is_logged_not_raised(fresh, capsys):
    fresh.setenv("SGLANG_EAGLE3_NCCL", "fastest")
    run_detokenizer_process()
    assert "NCCL_PROTO" not in os.environ
    assert "unknown NCCL preset 'fastest'" in capsys.readouterr().err


def test_source_patch_marker_means_the_plugin_does_not_record(fresh, tmp_path, capsys):
    env = _small_root(tmp_path)
    assert overview.describe(env, {"EAGLE3_PROFILE": "1"})["route"] == "plugin"
    worker = env.path(sglang_env.V2_FILE)
    # a source patch's decode probes and accept entry (the marked lines record cycles and counts)
    worker.write_text(worker.read_text() + "\n# _p.cycle_begin()  # sglang-eagle3-ext\n"
                      "# _p.record_accept(n, bonus_included=False)  # sglang-eagle3-ext\n")
    fresh.setattr(plugin, "locate", lambda *a: env)
    fresh.setenv("EAGLE3_PROFILE", "1")
    plugin.register()
    assert procstate._S.route == "source-patch" and procstate._S.registered == []
    assert "source patch present (eagle_worker_v2.py)" in capsys.readouterr().err
    d = overview.describe(env)
    assert d["route"] == "source-patch" and d["source_patch_files"] == [str(worker)]
    assert [h["role"] for h in d["plan"]["hooks"]] == []


def test_describe_routes_and_nccl_preview(fresh):
    new = sglang_env.locate(releases.fetch("0.5.23"))
    old = sglang_env.locate(releases.fetch("0.5.9"))
    environ = {"EAGLE3_PROFILE": "1", "SGLANG_EAGLE3_NCCL": "tuned", "NCCL_ALGO": "Tree"}
    d = overview.describe(new, environ)
    assert d["entry_point"] and d["active"] and d["route"] == "plugin"
    assert d["nccl"]["applied"] == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
    assert d["nccl"]["kept"] == {"NCCL_ALGO": {"user": "Tree", "preset": "Ring"}}
    assert "NCCL_PROTO" not in os.environ  # a preview only
    assert overview.describe(old, environ)["route"] == "none"
    assert "patch apply" in overview.describe(old, environ)["route_why"]
    assert overview.describe(new, {**environ, "SGLANG_PLUGINS": "other"})["route"] == "none"
    assert overview.describe(new, {})["route"] == "none" and not overview.describe(new, {})["active"]


def _batch(extend: bool = False, idle: bool = False, decode: bool = True) -> types.SimpleNamespace:
    mode = types.SimpleNamespace(is_extend=lambda: extend, is_idle=lambda: idle, is_decode=lambda: decode)
    return types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False)


def test_v1_hooks_time_phases_and_take_accepts_from_the_verify_return(traced):
    """V1 (0.5.11-0.5.12.post1) cannot run on 0.5.23: the hook bodies run against stand-in
    originals shaped like the releases' returns."""
    cycle = wrappers._cycle_hook({"rule": "not_extend", "arg": "batch", "extend_in_batch": "true"})
    verify = wrappers._verify_v1_hook("num_correct_drafts_per_req_cpu")  # 0.5.12 (v1.yaml)
    draft = wrappers._phase_hook("draft")
    out_0512 = types.SimpleNamespace(num_correct_drafts_per_req_cpu=[1, 0, 2])
    worker = types.SimpleNamespace(speculative_num_steps=3, topk=1, speculative_num_draft_tokens=4)
    procstate._S.missing = []  # already verified

    def body(self, batch):
        draft(lambda b: None, batch)
        verify(lambda b: ("logits", out_0512, True), batch)
        return "result"

    assert cycle(body, worker, _batch()) == "result"
    assert cycle(body, worker, _batch(extend=True)) == "result"  # prefill: the same body, unrecorded
    assert verify(lambda: ("l", types.SimpleNamespace(num_accepted_drafts_per_req_cpu=[9]), None, True)) is not None
    assert traced == [("set_spec_config", (3, 1, 4, "plugin")), ("cycle_begin", None),
                      ("phase_begin", "draft"), ("phase_end", "draft"),
                      ("phase_begin", "verify"), ("phase_end", "verify"),
                      ("record_accept", (1, 0, 2)), ("tag_cycle", (3, 1, 4, None, None, -1)),
                      ("cycle_end", None),
                      ("mark_boundary", "extend")]


def test_is_decode_rule_and_0_5_11_scheduler_accept(traced):
    cycle = wrappers._cycle_hook({"rule": "is_decode", "arg": "model_worker_batch"})
    procstate._S.missing = []
    w = types.SimpleNamespace()
    cycle(lambda self, model_worker_batch: None, w, model_worker_batch=_batch(decode=False))
    cycle(lambda self, model_worker_batch: None, w, model_worker_batch=_batch(decode=True))
    assert [t[0] for t in traced] == ["mark_boundary", "set_spec_config", "cycle_begin", "tag_cycle",
                                        "cycle_end"]
    accept = wrappers._accept_result_hook(("num_accepted_drafts_per_req_cpu", "num_correct_drafts_per_req_cpu"))
    result = types.SimpleNamespace(num_accepted_drafts_per_req_cpu=[3, 0])
    assert accept(lambda self, result, batch: "ids", None, result, None) == "ids"
    assert traced[-1] == ("record_accept", (3, 0))


def test_allreduce_paths_reads_the_tp_group():
    on = types.SimpleNamespace(disabled=False)
    off = types.SimpleNamespace(disabled=True)
    assert wrappers.allreduce_paths(types.SimpleNamespace(ca_comm=on, pynccl_comm=on)) == ["SGLang custom all-reduce"]
    assert wrappers.allreduce_paths(types.SimpleNamespace(ca_comm=off, pcie_ipc_comm=object())) == [
        "FlashInfer PCIe-IPC all-reduce"]
    assert wrappers.allreduce_paths(types.SimpleNamespace(ca_comm=None)) == []
