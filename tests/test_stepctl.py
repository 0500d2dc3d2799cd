"""Step control (issue 22 part 2): the hold schedule, the step-control hooks, what each release can do.

Real: the pinned release sources (stepctl.plan / hookplan.plan_hooks read them with ast), the hold
schedule and the hook bodies. Faked (GPU objects only): the adaptive controller's worker and its
runtime states, as plain objects with ``speculative_num_steps``, ``_states`` and ``_activate``
(building real states needs CUDA graphs). tests/test_stepctl_sglang.py runs the same hooks on
SGLang 0.5.23's real AdaptiveController through its real HookRegistry.
"""

from __future__ import annotations

import types

import pytest

from sglang_eagle3_ext.runtime import hold, sglang_env, stepctl
from sglang_eagle3_ext.runtime.plugin import hookplan, overview, procstate, wrappers

PINNED_ADAPTIVE = ("0.5.12.post1", "0.5.13", "0.5.16", "0.5.23")


@pytest.fixture(autouse=True)
def _uninstall():
    stepctl.install(None)
    stepctl._warned.clear()
    yield
    stepctl.install(None)


# ------------------------------------------------------------------------------------------------
# The schedule

def test_each_round_holds_every_candidate_once_in_a_shuffled_order():
    """Rounds of blocks, every candidate once per round in an order drawn per (level, round), each
    block 2..6 cycles for N = 4 (mean 4): drawn from a fixed integer hash (hold.mix64), so the
    values are pinned here; a change of the hash would make two versions' ranks disagree."""
    order = (4, 2, 0)
    got = [hold.slot(c, 4, order) for c in range(40)]
    blocks: dict[int, list[int]] = {}
    for b, s in got:
        blocks.setdefault(b, []).append(s)
    assert all(len(set(v)) == 1 for v in blocks.values())  # one step count per block
    steps = [v[0] for _, v in sorted(blocks.items())]
    full = len(steps) // 3 * 3
    assert all(sorted(steps[i:i + 3]) == [0, 2, 4] for i in range(0, full, 3))  # each round: all once
    assert len({tuple(steps[i:i + 3]) for i in range(0, full, 3)}) > 1  # ... in changing orders
    assert [s for _, s in got[:16]] == [0, 0, 0, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4]
    lens = [hold.block_length(1, b, 32) for b in range(4000)]
    assert min(lens) == 16 and max(lens) == 48 and abs(sum(lens) / len(lens) - 32) < 0.5
    assert [hold.block_length(1, b, 1) for b in range(5)] == [1] * 5
    assert hold.round_order(1, 0, order) != hold.round_order(8, 0, order) or \
        hold.round_order(1, 1, order) != hold.round_order(8, 1, order)  # levels draw apart
    # the decider computes the same schedule incrementally
    d = hold.HoldDecider(4, order)
    assert [d.choose(1, 4, (0, 2, 4)) for _ in range(40)] == [s for _, s in got]
    assert d.block == got[-1][0]


def test_each_load_level_goes_through_all_candidates_on_its_own_count():
    """bs 5..8 pad to the CUDA-graph size 8 (one level, one counter); bs 1 has its own."""
    info = stepctl.ControllerInfo(built=(1, 2, 3), cuda_graph_bs=(1, 2, 4, 8, 16))
    assert [info.level_of(b) for b in (1, 3, 5, 8, 9, 40)] == [1, 4, 8, 8, 16, 40]
    d = hold.HoldDecider(2, (3, 2, 1), info.level_of)
    sizes = (1, 6, 1, 7, 1, 8, 8, 1, 5, 1, 1, 6, 6, 1)
    seq = [d.choose(bs, 3, info.built) for bs in sizes]
    n = {1: 0, 8: 0}
    want = []
    for bs in sizes:
        lv = info.level_of(bs)
        want.append(hold.slot(n[lv], 2, (3, 2, 1), lv)[1])
        n[lv] += 1
    assert seq == want
    assert {s for s, bs in zip(seq, sizes, strict=True) if bs == 1} == {1, 2, 3}


def test_two_ranks_fed_the_same_events_choose_the_same_steps():
    """The schedule is a pure function of the batch sizes seen: two simulated TP ranks (two
    deciders, accept counts that differ in arrival time) agree cycle by cycle."""
    import random

    rnd = random.Random(7)
    sizes = [rnd.choice((1, 2, 3, 7, 8, 15, 16, 31)) for _ in range(600)]
    info = stepctl.ControllerInfo(built=(0, 1, 2, 3, 4, 5), cuda_graph_bs=(1, 2, 4, 8, 16, 32))
    ranks = [hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "16"}) for _ in range(2)]
    a, b = ([r.choose(bs, 5, info.built) for bs in sizes] for r in ranks)
    ranks[0].observe([1, 2], 2, 5)  # observing never moves the schedule
    assert a == b and set(a) == {0, 1, 2, 3, 4, 5}
    fresh = hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "16"})
    assert [fresh.choose(bs, 5, info.built) for bs in sizes] == a  # and the same again


def test_hold_settings_and_refusals():
    info = stepctl.ControllerInfo(built=(0, 1, 2, 3))
    d = hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "10"})
    assert d.candidates == (3, 2, 1, 0) and d.block_len == 10  # largest first: the start step
    d = hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "10", "SGLANG_EAGLE3_HOLD_STEPS": "1,3"})
    assert d.candidates == (1, 3)
    with pytest.raises(ValueError, match="steps 5 have no adaptive state"):
        hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "10", "SGLANG_EAGLE3_HOLD_STEPS": "1,5"})
    with pytest.raises(ValueError, match="not a comma list"):
        hold.from_settings(info, {"SGLANG_EAGLE3_HOLD": "10", "SGLANG_EAGLE3_HOLD_STEPS": "1,1"})
    assert stepctl.requested({"SGLANG_EAGLE3_HOLD": "10"}) == ("hold", None)
    assert stepctl.requested({"SGLANG_EAGLE3_HOLD": "x"})[1].startswith("SGLANG_EAGLE3_HOLD='x' is not")
    name, why = stepctl.requested({"SGLANG_EAGLE3_HOLD": "10", "SGLANG_EAGLE3_POLICY": "/s.json"})
    assert name == "hold" and "both set" in why
    assert stepctl.requested({"SGLANG_EAGLE3_POLICY": "/s.json"}) == ("policy", None)
    assert stepctl.requested({}) == (None, None)


# ------------------------------------------------------------------------------------------------
# The hooks, on a fake controller (GPU objects faked: states are plain markers)

class FakeWorker:
    def __init__(self, steps: int) -> None:
        self.speculative_num_steps = steps
        self.speculative_num_draft_tokens = steps + 1


class FakeController:
    """The attributes the hooks touch on SGLang's AdaptiveController (0.5.13-0.5.23)."""

    def __init__(self, built=(0, 1, 2, 3), start=3) -> None:
        self.worker = FakeWorker(start)
        self._states = {s: f"state{s}" for s in built}
        self.params = types.SimpleNamespace(_slots={1: types.SimpleNamespace(candidate_steps=list(built))},
                                            _cuda_graph_bs=[1, 2, 4, 8])
        self.switches: list[int] = []
        self.ema_calls = 0

    def _activate(self, steps: int) -> None:
        self.switches.append(steps)  # what apply_runtime_state sets (topk 1: draft tokens = steps + 1)
        self.worker.speculative_num_steps = steps
        self.worker.speculative_num_draft_tokens = steps + 1

    # what SGLang's own methods would do: the hooks must not call them while a decider holds
    def activate_step_by_batch(self, batch_size: int) -> None:
        raise AssertionError("SGLang's rule called while a decider holds")

    def on_verify_complete(self, num_correct_drafts_per_req, batch_size) -> None:
        self.ema_calls += 1


def _init(ctrl, monkeypatch, env, missing=()):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    init = stepctl.init_hook("hold", lambda: list(missing))
    return init(lambda self, *a, **k: "built", ctrl)


def test_activate_holds_and_switches_only_on_a_change(monkeypatch):
    ctrl = FakeController()
    assert _init(ctrl, monkeypatch, {"SGLANG_EAGLE3_HOLD": "2"}) == "built"
    d = stepctl.installed()
    assert d.name == "hold" and d.candidates == (3, 2, 1, 0)
    for _ in range(8):
        stepctl.activate_hook(FakeController.activate_step_by_batch, ctrl, 1)
    ran = [hold.slot(c, 2, (3, 2, 1, 0), 1) for c in range(8)]
    want = [s for i, (_, s) in enumerate(ran) if s != ([3] + [x for _, x in ran])[i]]
    assert ctrl.switches == want and len(want) >= 2  # a held step equal to the current one: no switch
    assert stepctl.control() == {"decider": "hold", "block": ran[-1][0], "candidates": [3, 2, 1, 0]}


def test_verify_side_gets_the_steps_of_the_cycle_that_produced_it(monkeypatch):
    """Overlap scheduler: the verify result of cycle N is processed after cycle N+1 was launched
    (and N+1 may run another step count). SGLang's EMA is never fed."""
    ctrl = FakeController()
    _init(ctrl, monkeypatch, {"SGLANG_EAGLE3_HOLD": "1"})
    seen = []
    d = stepctl.installed()
    d.observe = lambda counts, bs, steps: seen.append((tuple(counts), bs, steps))
    prev = None
    for i in range(4):
        stepctl.activate_hook(FakeController.activate_step_by_batch, ctrl, 2)
        if prev is not None:
            stepctl.verify_hook(FakeController.on_verify_complete, ctrl, prev, batch_size=2)
        prev = [i, i]
    ran = [hold.slot(c, 1, (3, 2, 1, 0), 2)[1] for c in range(4)]  # level 2 (bs 2 is a graph size)
    assert seen == [((0, 0), 2, ran[0]), ((1, 1), 2, ran[1]), ((2, 2), 2, ran[2])]
    assert ctrl.ema_calls == 0


def test_a_failing_decider_hands_back_to_sglang_without_raising(monkeypatch, caplog):
    ctrl = FakeController()
    _init(ctrl, monkeypatch, {"SGLANG_EAGLE3_HOLD": "1"})
    stepctl.installed().choose = lambda *a: 99  # not a built state
    called = []
    stepctl.activate_hook(lambda self, bs: called.append(bs), ctrl, 4)
    assert called == [4] and stepctl.installed() is None and ctrl.switches == []
    # no decider: both hooks are SGLang's own methods
    stepctl.verify_hook(FakeController.on_verify_complete, ctrl, [1], batch_size=1)
    assert ctrl.ema_calls == 1


def test_init_refuses_to_start_with_the_reason(monkeypatch):
    ctrl = FakeController(built=(1, 2))
    with pytest.raises(RuntimeError, match="needs its hooks on every rank; not applied in this process: X"):
        _init(ctrl, monkeypatch, {"SGLANG_EAGLE3_HOLD": "4"}, missing=["X"])
    with pytest.raises(RuntimeError, match="steps 3 have no adaptive state"):
        _init(ctrl, monkeypatch, {"SGLANG_EAGLE3_HOLD": "4", "SGLANG_EAGLE3_HOLD_STEPS": "3"})
    refuse = stepctl.init_hook("hold", list, "both set")
    with pytest.raises(RuntimeError, match="sglang-eagle3-ext: both set"):
        refuse(lambda self: None, ctrl)
    assert stepctl.installed() is None


# ------------------------------------------------------------------------------------------------
# Per release (the real pinned sources)

@pytest.mark.parametrize("release_root", ["0.5.9", *PINNED_ADAPTIVE], indirect=True)
def test_support_follows_each_release(release_root):
    env = sglang_env.locate(release_root)
    ok, why = stepctl.support(env)
    p = stepctl.plan(env)
    if env.version == "0.5.9":
        assert not ok and "no adaptive speculative runtime" in why and "sweep" in why
    elif env.version == "0.5.12.post1":
        assert not ok and "two batches later" in why and "0.5.13+" in why
    else:
        assert ok and p["tiers"] and p["step0"] == (env.version != "0.5.13")
        assert len(p["targets"]) == 3
    # the plugin compiles the same answer: three hooks, or one that refuses to start
    plan = hookplan.plan_hooks(env, profile=False, aux=False, nccl_preset=False, step_control="hold")
    roles = [h.role for h in plan.hooks]
    if ok:
        assert roles == ["stepctl-init", "stepctl-activate", "stepctl-verify"] and not plan.problems
        assert [h.target for h in plan.hooks] == p["targets"]
    elif env.version == "0.5.12.post1":  # a controller exists: its init_states refuses
        assert roles == ["stepctl-init"] and plan.hooks[0].detail["refuse"] == why
    else:  # 0.5.9: no plugin framework either; `scan` refuses first with `why` (support)
        assert roles == [] and "no plugin framework" in plan.problems[0]


@pytest.mark.parametrize("release_root", ["0.5.16"], indirect=True)
def test_hold_and_policy_together_compile_to_a_refusal(release_root):
    env = sglang_env.locate(release_root)
    _, why = stepctl.requested({"SGLANG_EAGLE3_HOLD": "8", "SGLANG_EAGLE3_POLICY": "x.json"})
    plan = hookplan.plan_hooks(env, profile=True, aux=False, nccl_preset=False, step_control="hold", refuse=why)
    ctl = [h for h in plan.hooks if h.family == "stepctl"]
    assert [h.role for h in ctl] == ["stepctl-init"] and ctl[0].detail["refuse"] == why
    assert any(h.role == "cycle" for h in plan.hooks)  # the probes are unaffected


@pytest.mark.parametrize("release_root", ["0.5.13"], indirect=True)
def test_describe_says_what_step_control_does_here(release_root):
    env = sglang_env.locate(release_root)
    d = overview.describe(env, {"SGLANG_EAGLE3_HOLD": "32"})
    assert d["active"] and d["switches"]["step_control"] == "hold"
    sc = d["step_control"]
    assert sc["ok"] and not sc["step0"] and sc["refused"] is None and "loader refuses 0" in sc["reason"]
    assert [h["role"] for h in d["plan"]["hooks"]] == ["stepctl-init", "stepctl-activate", "stepctl-verify"]
    assert "step_control" not in overview.describe(env, {})


def test_hold_without_an_adaptive_controller_is_said_at_the_first_decode_cycle(monkeypatch, caplog):
    """Started without --speculative-adaptive: no init_states ever runs; the first decode cycle
    (probes on) names it, once."""
    import logging

    from sglang_eagle3_ext.runtime import probes

    monkeypatch.setattr(procstate._S, "missing", [])
    monkeypatch.setattr(procstate._S, "stepctl_checked", False)
    monkeypatch.setattr(procstate._S, "registered", [hookplan.Hook("stepctl-init", "stepctl", "x.init_states")])
    cycle = wrappers._cycle_hook({"rule": "not_extend", "arg": "batch", "extend_in_batch": "false"})
    mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
    batch = types.SimpleNamespace(forward_mode=mode)
    probes.reset(environ={})
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_ext.runtime.plugin"):  # attaches to our logger
        for _ in range(2):
            cycle(lambda self, batch: None, FakeWorker(3), batch)
    msgs = [r.getMessage() for r in caplog.records if "no adaptive controller" in r.getMessage()]
    assert len(msgs) == 1 and "--speculative-adaptive" in msgs[0]
