"""Per-cycle keys (issue 22 part 1): every decode cycle tagged with what ran it, accept counts
matched to the cycle that produced them, eagle3_prof/3 records and their summaries.

Real: the Profiler, the plugin's cycle hook (it reads the tag after the original returns), the
step-control hook and the hold decider, the record reader, profile_log's summaries. Faked (GPU
objects only): the timer backend (``FakeEventTimer`` on a scripted clock, as in test_steady.py),
the worker / adaptive controller (steps, ``_states``, ``_activate``) and the forward itself, which
here does what SGLang 0.5.13+ does first in its decode branch: ``activate_step_by_batch(bs)``.
The accept counts of cycle N arrive after cycle N+1 ran (the overlap scheduler).
"""

from __future__ import annotations

import json
import types

import pytest
from conftest import REPO
from scripted import Clock
from test_stepctl import FakeController

from sglang_eagle3_ext.documents import prof_records, records
from sglang_eagle3_ext.measure import accounting
from sglang_eagle3_ext.runtime import probes, stepctl
from sglang_eagle3_ext.runtime.plugin import procstate, wrappers
from sglang_eagle3_ext.runtime.probes import timers

STEP_MS = 2.0  # draft ms per step
VERIFY_MS, EXTEND_MS, GAP_MS = 20.0, 1.0, 0.5
ACCEPTS = {3: [3, 2], 1: [1, 0], 0: [0, 0]}  # correct drafts per request at each step count


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setattr(procstate._S, "missing", [])  # hooks already verified
    stepctl.install(None)
    yield
    stepctl.install(None)
    probes.reset(environ={})


def _start(tmp_path, every: int, **env: str) -> Clock:
    clock = Clock()
    environ = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": str(every),
               "EAGLE3_PROFILE_OUT": str(tmp_path / "prof.jsonl"), **env}
    probes.reset(environ=environ, backend=timers.FakeEventTimer(clock))
    return clock


def _run(ctrl, clock, cycles: int, bs: int = 2, graph: bool = True, pending=None, last: bool = True):
    """``cycles`` decode cycles through the plugin's cycle hook; accepts one cycle late. Returns the
    counts still to come (``last=False``: the run goes on with another call)."""
    cycle = wrappers._cycle_hook({"rule": "not_extend", "arg": "batch", "extend_in_batch": "true"})
    worker = ctrl.worker
    worker.topk = 1

    def forward(self, batch):
        # SGLang 0.5.13+: the decode branch asks the controller first (our hook when installed)
        stepctl.activate_hook(lambda c, n: None, ctrl, batch.seq_lens.shape[0])
        steps = self.speculative_num_steps
        for name, ms in (("draft", STEP_MS * steps), ("verify", VERIFY_MS), ("extend", EXTEND_MS)):
            probes.phase_begin(name)
            clock.ms(ms)
            probes.phase_end(name)
        return types.SimpleNamespace(speculative_num_draft_tokens=steps + 1, can_run_cuda_graph=graph,
                                     steps=steps)

    mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
    batch = types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False,
                                  seq_lens=types.SimpleNamespace(shape=(bs,)))
    for _ in range(cycles):
        out = cycle(forward, worker, batch)
        if pending is not None:  # the scheduler processes the previous batch's result now
            probes.record_accept(pending, bonus_included=False)
        pending = ACCEPTS[out.steps][:bs]
        clock.ms(GAP_MS)
    if not last:
        return pending
    probes.cycle_begin()  # the next batch starts; then the last result is processed
    probes.record_accept(pending, bonus_included=False)
    return None


def pin_rotation(monkeypatch):
    """The schedule's draws (hold.round_order / block_length) replaced by a fixed rotation, forward
    then back, blocks of exactly N: the windows below are then known by hand. The shuffled
    schedule itself is tested in test_stepctl.py and test_scan_one_text.py."""
    from sglang_eagle3_ext.runtime import hold

    monkeypatch.setattr(hold, "block_length", lambda level, block_id, n: n)
    monkeypatch.setattr(hold, "round_order", lambda level, rnd, c: tuple(c) if rnd % 2 == 0 else tuple(c)[::-1])


def test_held_blocks_are_tagged_after_the_switch_and_accepts_find_their_cycle(tmp_path, monkeypatch):
    """Hold blocks of 4 over steps 3, 1 (then 1, 3: a pinned rotation): 16 cycles, windows of 7.
    Each key holds only its own cycles and accepts; the first cycle at a new step count is a
    'switch' boundary; the last cycle of a window, whose counts arrive in the next window, stays out
    of by_key (and says nothing wrong)."""
    pin_rotation(monkeypatch)
    monkeypatch.setenv("SGLANG_EAGLE3_HOLD", "4")
    ctrl = FakeController(built=(1, 3), start=3)
    stepctl.init_hook("hold", list)(lambda self: None, ctrl)
    clock = _start(tmp_path, 7)
    _run(ctrl, clock, 16)
    probes.flush()
    recs = [json.loads(x) for x in (tmp_path / "prof.jsonl").read_text().splitlines()]
    assert [r["schema"] for r in recs] == ["eagle3_prof/3"] * 3 and ctrl.switches == [1, 3]
    w1, w2, w3 = recs
    # window 1 = cycles 1-7: 1-4 at 3 steps (block 0), 5 switches to 1, 6 steady, 7 awaits its counts
    assert w1["boundary"]["reasons"]["switch"] == 1
    assert set(w1["by_key"]) == {"s3.k1.d4.b2.g", "s1.k1.d2.b2.g"}
    s3, s1 = w1["by_key"]["s3.k1.d4.b2.g"], w1["by_key"]["s1.k1.d2.b2.g"]
    assert (s3["cycles"], s3["requests"], s3["accepted_drafts"], s3["accept_len"]) == (4, 8, 20, 3.5)
    assert s3["accept_hist"] == {"2": 4, "3": 4} and s3["per_position"] == [1.0, 1.0, 0.5]
    assert s3["phases"]["cycle"]["mean_ms"] == 3 * STEP_MS + VERIFY_MS + EXTEND_MS + GAP_MS
    assert s3["phases"]["draft"]["mean_ms"] == 6.0 and s3["graph"] is True and s3["bs"] == 2
    assert s3["per_stream_tok_s"] == round(3.5 * 1000 / 27.5, 2)
    assert s3["throughput_tok_s"] == round(28 * 1000 / (4 * 27.5), 2)
    assert s3["parts"] == [[0, 4, 110.0, 28, 8]]
    assert (s1["cycles"], s1["accept_len"], s1["parts"]) == (1, 1.5, [[1, 1, 23.5, 3, 2]])
    assert w1["control"] == {"decider": "hold", "block": 1, "candidates": [3, 1],
                             "choices": {"2": {"1": 3, "3": 4}}}
    # window 2 = cycles 8-14: 8 (block 1), 9-12 (block 2, still 1 step), 13 switches back, 14 awaits
    assert w2["by_key"]["s1.k1.d2.b2.g"]["parts"] == [[1, 1, 23.5, 3, 2], [2, 4, 94.0, 12, 8]]
    assert "s3.k1.d4.b2.g" not in w2["by_key"] and w2["boundary"]["reasons"]["switch"] == 1
    assert w3["by_key"]["s3.k1.d4.b2.g"]["parts"] == [[3, 2, 55.0, 14, 4]]
    # over windows: parts merged by block id (block 1 spans windows 1 and 2)
    keys = accounting.by_key_summary(recs)
    assert list(keys) == ["s1.k1.d2.b2.g", "s3.k1.d4.b2.g"]
    k1, k3 = keys["s1.k1.d2.b2.g"], keys["s3.k1.d4.b2.g"]
    assert k1["parts"] == [[1, 2, 47.0, 6, 4], [2, 4, 94.0, 12, 8]] and k1["cycles"] == 6
    assert k3["parts"] == [[0, 4, 110.0, 28, 8], [3, 2, 55.0, 14, 4]] and k3["accept_len"] == 3.5
    assert k1["per_stream_tok_s"] == round(1.5 * 1000 / 23.5, 2) and k1["per_position"] == [0.5]
    assert [p["per_stream_tok_s"] for p in accounting.part_rates(k3["parts"])] == [127.27, 127.27]
    ctl = accounting.control_summary(recs)
    assert ctl["decider"] == "hold" and ctl["choices"] == {"2": {"1": 8, "3": 8}}
    # the /2 fields stay, for older readers
    assert "2" in w1["by_batch"] and w1["steady"]["cycles"] == 6


def test_sglang_own_adaptive_switch_between_cycles_is_seen(tmp_path):
    """No decider: SGLang's EMA switches from the verify side, between two forwards (0.5.13+). The
    probes need no help to see it: each cycle's tag is what the worker ran."""
    ctrl = FakeController(built=(1, 3), start=3)
    clock = _start(tmp_path, 100)
    pending = _run(ctrl, clock, 3, last=False)
    ctrl._activate(1)  # SGLang's on_verify_complete decided
    _run(ctrl, clock, 3, pending=pending)
    rec = probes.flush()
    assert rec["control"]["decider"] is None and rec["control"]["choices"] == {"2": {"1": 3, "3": 3}}
    assert rec["boundary"]["reasons"]["switch"] == 1
    assert {k: v["cycles"] for k, v in rec["by_key"].items()} == {"s1.k1.d2.b2.g": 2, "s3.k1.d4.b2.g": 3}
    assert all(p[0] == -1 for v in rec["by_key"].values() for p in v["parts"])  # no hold block


def test_source_patch_route_tags_from_the_spec_and_sizes_from_the_counts(tmp_path):
    """No tag_cycle (the source patch): steps / topk / draft tokens from EAGLE3_PROFILE_SPEC, the
    batch size from the accept counts, graph unknown; counts one cycle late still match."""
    clock = _start(tmp_path, 100, EAGLE3_PROFILE_SPEC="3,1,4")
    pending = None
    for _ in range(4):
        probes.cycle_begin()
        clock.ms(10)
        probes.cycle_end()
        if pending:
            probes.record_accept(pending, bonus_included=True)  # V2 accept_lens: drafts + bonus
        pending = [4, 1, 2]
    probes.cycle_begin()
    probes.record_accept(pending, bonus_included=True)
    rec = probes.flush()
    assert list(rec["by_key"]) == ["s3.k1.d4.b3.u"]
    cell = rec["by_key"]["s3.k1.d4.b3.u"]
    assert (cell["cycles"], cell["requests"], cell["accept_len"], cell["graph"]) == (4, 12, round(7 / 3, 4), None)


def test_a_retracted_batch_does_not_shift_the_counts(tmp_path):
    """A cycle whose verify result never comes (its batch size differs from the counts that do):
    skipped, so the next counts still land on their own cycle."""
    clock = _start(tmp_path, 100)
    p = probes._P
    for bs in (3, 2):
        probes.cycle_begin()
        probes.tag_cycle(2, 1, 3, bs, False, -1)
        clock.ms(10)
        probes.cycle_end()
    probes.record_accept([], bonus_included=False)  # an empty verify belongs to no cycle
    probes.record_accept([1, 1], bonus_included=False)  # the bs-2 cycle's counts
    probes.cycle_begin()
    rec = probes.flush()
    assert rec["by_key"]["s2.k1.d3.b2.e"]["requests"] == 2 and "s2.k1.d3.b3.e" not in rec["by_key"]
    assert p._mismatch == 0


def test_records_round_trip_v3_and_older_still_read(tmp_path):
    clock = _start(tmp_path, 100)
    _run(FakeController(built=(3,), start=3), clock, 3)
    rec = json.loads(json.dumps(probes.flush()))
    view = records.WindowRecord.from_json(rec, "prof.jsonl:1")
    assert view.version == 3 and view.by_key == rec["by_key"] and view.control == rec["control"]
    assert records.to_json(view) == rec
    old = {k: v for k, v in rec.items() if k not in ("by_key", "control")}
    for v in (1, 2):
        assert records.WindowRecord.from_json({**old, "schema": f"eagle3_prof/{v}"}, "x").version == v
    assert accounting.by_key_summary([{**old, "schema": "eagle3_prof/2"}]) == {}
    assert accounting.control_summary([old]) is None
    run = prof_records.load(tmp_path / "prof.jsonl")
    s = accounting.summarize(run)
    assert "s3.k1.d4.b2.g" in s["by_key"] and s["control"]["choices"] == {"2": {"3": 3}}


def test_profile_shows_which_steps_ran_at_which_batch_size(tmp_path, capsys):
    """SGLang's own adaptive mode switching 3 -> 1 at batch size 2: `profile` says what ran where."""
    from sglang_eagle3_ext import cli

    ctrl = FakeController(built=(1, 3), start=3)
    clock = _start(tmp_path, 100)
    pending = _run(ctrl, clock, 3, last=False)
    ctrl._activate(1)
    _run(ctrl, clock, 1, pending=pending)
    probes.flush()
    assert cli.main(["profile", str(tmp_path / "prof.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Step counts run per batch size" in out
    assert "1: 1 (25%), 3: 3 (75%)" in out and "SGLang (its own adaptive rule" in out


# ------------------------------------------------------------------------------------------------
# A committed /3 sample for the readers (scan tables, policy): a hold schedule over steps 3..0 at
# two loads, written by the real probes from a recorded sequence (scripted clock, seeded accepts).
HOLD_SAMPLE = REPO / "tests" / "data" / "profile" / "hold_v3.jsonl"
VOLATILE = ("time", "probe_wait_ms", "probe_read_ms", "sglang_version")


def write_hold_sample(tmp_path):
    """HOLD=8 over built steps 0..3 (started at 3; CUDA-graph sizes 1, 2, 4, 8, 16): 96 decode
    cycles at batch size 1, then 96 at 8, windows of 50, counts one cycle late. Acceptance: each
    draft position accepted with p 0.8 (seeded walk). Cycle ms: draft 1.2 / step, verify
    4.0 + 0.1 bs + 0.3 (steps + 1) bs / 8, extend 0.5, gap 0.3."""
    import random

    rnd = random.Random(22)
    ctrl = FakeController(built=(0, 1, 2, 3), start=3)
    ctrl.params._cuda_graph_bs = [1, 2, 4, 8, 16]
    ctrl.worker.topk = 1
    stepctl.init_hook("hold", list)(lambda self: None, ctrl)
    clock = _start(tmp_path, 50)
    cycle = wrappers._cycle_hook({"rule": "not_extend", "arg": "batch", "extend_in_batch": "true"})

    def forward(self, batch):
        bs = batch.seq_lens.shape[0]
        stepctl.activate_hook(lambda c, n: None, ctrl, bs)
        steps = self.speculative_num_steps
        for name, ms in (("draft", 1.2 * steps), ("verify", 4.0 + 0.1 * bs + 0.3 * (steps + 1) * bs / 8),
                         ("extend", 0.5)):
            if ms:
                probes.phase_begin(name)
                clock.ms(ms)
                probes.phase_end(name)
        return types.SimpleNamespace(speculative_num_draft_tokens=steps + 1, can_run_cuda_graph=True)

    def walk(steps):
        n = 0
        while n < steps and rnd.random() < 0.8:
            n += 1
        return n

    mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
    pending = None
    for bs in [1] * 96 + [8] * 96:
        batch = types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False,
                                      seq_lens=types.SimpleNamespace(shape=(bs,)))
        cycle(forward, ctrl.worker, batch)
        if pending is not None:
            probes.record_accept(pending, bonus_included=False)
        pending = [walk(ctrl.worker.speculative_num_steps) for _ in range(bs)]
        clock.ms(0.3)
    probes.cycle_begin()
    probes.record_accept(pending, bonus_included=False)
    probes.flush()
    return [json.loads(x) for x in (tmp_path / "prof.jsonl").read_text().splitlines()]


def _stable(recs):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in recs]


def test_committed_hold_sample_is_what_the_probes_write(tmp_path, monkeypatch):
    """tests/data/profile/hold_v3.jsonl is regenerated here and must match (all but the time and
    the probes' own read cost): the sample cannot drift from the writer."""
    monkeypatch.setenv("SGLANG_EAGLE3_HOLD", "8")
    recs = write_hold_sample(tmp_path)
    committed = [json.loads(x) for x in HOLD_SAMPLE.read_text().splitlines()]
    assert _stable(recs) == _stable(committed)
    keys = accounting.by_key_summary(recs)
    assert sorted(keys, key=accounting._key_order) == list(keys)
    assert {(v["bs"], v["steps"]) for v in keys.values()} == {(b, s) for b in (1, 8) for s in range(4)}
    ctl = accounting.control_summary(recs)
    # every load level went through every candidate on its own count: 96 cycles each, in blocks of
    # 4..12 cycles (mean 8), every candidate once per round in a shuffled order (hold.py)
    assert ctl["choices"] == {"1": {"0": 16, "1": 20, "2": 31, "3": 29}, "8": {"0": 20, "1": 21, "2": 30, "3": 25}}
    assert all(sum(v.values()) == 96 for v in ctl["choices"].values())
    assert [len(keys[f"s{s}.k1.d{s + 1}.b{b}.g"]["parts"]) for b in (1, 8) for s in range(4)] == [2, 2, 3, 3, 3, 4, 4, 4]
    assert keys["s0.k1.d1.b8.g"]["per_position"] == [] and keys["s0.k1.d1.b8.g"]["accept_len"] == 1.0


def test_server_log_blocks_say_what_ran_too(tmp_path):
    """The block's 'Steps ran' line reads back from a server log into control.choices."""
    from sglang_eagle3_ext.runtime.probes.window import format_block

    recs = [json.loads(x) for x in HOLD_SAMPLE.read_text().splitlines()]
    log = tmp_path / "server.log"
    log.write_text("\n".join(["INFO noise"] + [format_block(r) for r in recs]) + "\n")
    run = prof_records.load(log)
    assert [r["control"] for r in run.records] == [
        {**{k: r["control"][k] for k in ("decider", "block", "choices")}, "candidates": None} for r in recs]
    assert accounting.summarize(run, all_windows=True)["control"]["choices"] == \
        accounting.control_summary(recs)["choices"]
