"""Probes runtime: disabled path, trace contract, windows, JSONL round trip, timing modes, ranks.

CUDA is the one thing this machine lacks: ``events`` mode is exercised with
``timers.FakeEventTimer`` (the real pool/lazy-read logic, a scripted clock as "GPU"), which raises
if a window is read before its newest event was synchronized, and counts every sync.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from scripted import Clock

from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import accounting
from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.probes import timers

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_probes():
    yield
    probes.reset(environ={})


def on(tmp_path: Path | None = None, **extra: str) -> dict[str, str]:
    env = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "10"}
    if tmp_path is not None:
        env["EAGLE3_PROFILE_OUT"] = str(tmp_path / "prof.jsonl")
    env.update(extra)
    return env


def drive(clock: Clock, n: int, accepts, *, draft=2.0, verify=28.0, extend=1.0, tail=0.5,
          bonus_included=False, late=False) -> None:
    """n decode cycles with fixed phase times; ``accepts[i]`` is the per-request list of cycle i.

    ``late=True`` delivers each cycle's counts inside the next cycle (the V2 overlap scheduler).
    """
    pending = None
    for i in range(n):
        probes.cycle_begin()
        if pending is not None:
            probes.record_accept(pending, bonus_included=bonus_included)
            pending = None
        for name, ms in (("draft", draft), ("verify", verify), ("extend", extend)):
            probes.phase_begin(name)
            clock.ms(ms)
            probes.phase_end(name)
        if late:
            pending = accepts[i]
        else:
            probes.record_accept(accepts[i], bonus_included=bonus_included)
        probes.cycle_end()
        clock.ms(tail)
    probes.cycle_begin()  # closes the last cycle
    if pending is not None:
        probes.record_accept(pending, bonus_included=bonus_included)


def test_disabled_path_never_imports_torch_subprocess():
    code = (
        "import sys\n"
        "from sglang_eagle3_ext import probes\n"
        "for _ in range(1000):\n"
        "    probes.cycle_begin(); probes.phase_begin('draft'); probes.phase_end('draft')\n"
        "    probes.record_accept([1, 2], bonus_included=False); probes.cycle_end()\n"
        "probes.set_spec_config(steps=5); probes.mark_boundary('extend'); probes.flush()\n"
        "assert not probes.enabled() and probes.trace == [] and len(probes.windows) == 0\n"
        "assert 'torch' not in sys.modules, 'disabled probes imported torch'\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("EAGLE3_PROFILE")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok" and r.stderr == ""


def test_disabled_path_makes_no_call_into_torch(monkeypatch):
    """A recording stand-in for torch sits in sys.modules: the disabled API must not touch it."""
    touched: list[str] = []

    class Recorder(types.ModuleType):
        def __getattr__(self, name: str):
            touched.append(name)
            raise AttributeError(name)

    monkeypatch.setitem(sys.modules, "torch", Recorder("torch"))
    probes.reset(environ={"EAGLE3_PROFILE": "0", "EAGLE3_PROFILE_TRACE": "1"})
    for _ in range(100):
        probes.cycle_begin()
        probes.phase_begin("verify")
        probes.phase_end("verify")
        probes.record_accept([3], bonus_included=True)
        probes.cycle_end()
    assert probes.flush() is None
    assert touched == [] and probes.trace == [] and not probes.enabled()


def test_trace_contract_for_patch_and_plugin_tests():
    probes.reset(environ=on(EAGLE3_PROFILE_TRACE="1"), backend=timers.FakeEventTimer(Clock()))
    probes.cycle_begin()
    probes.phase_begin("draft")
    probes.phase_end("draft")
    probes.record_accept([2, 1], bonus_included=False)
    probes.set_spec_config(steps=3, topk=1, draft_tokens=4, route="plugin")
    probes.cycle_end()
    assert probes.trace == [
        ("cycle_begin", None), ("phase_begin", "draft"), ("phase_end", "draft"),
        ("record_accept", (2, 1)), ("set_spec_config", (3, 1, 4, "plugin")), ("cycle_end", None),
    ]
    probes.reset(environ=on())
    probes.cycle_begin()
    assert probes.trace == []  # trace is opt-in


def test_window_block_and_jsonl_round_trip(tmp_path, capsys):
    clock = Clock()
    probes.reset(environ=on(tmp_path, EAGLE3_PROFILE_SPEC="3,1,4", EAGLE3_PROFILE_ROUTE="source-patch"),
                 backend=timers.FakeEventTimer(clock))
    # 20 cycles, one request each; accepted drafts cycle through 0,1,2,3,3 -> 9 per 5 cycles
    accepts = [[(0, 1, 2, 3, 3)[i % 5]] for i in range(20)]
    drive(clock, 20, accepts)
    recs = [json.loads(x) for x in (tmp_path / "prof.jsonl").read_text().splitlines()]
    assert [r["window"] for r in recs] == [1, 2] and list(probes.windows) == recs
    r = recs[0]
    assert r["schema"] == "eagle3_prof/3" and r["mode"] == "events" and r["rank"] == 0
    assert (r["cycles"], r["requests"], r["accepted_drafts"], r["tokens"]) == (10, 10, 18, 28)
    assert r["accept_len"] == 2.8
    assert r["accept_hist"] == {"0": 2, "1": 2, "2": 2, "3": 4}
    # position 1: reached 10, accepted 8; 2: reached 8, accepted 6; 3: reached 6, accepted 4
    assert r["per_position"] == [0.8, 0.75, 0.666667]
    ph = r["phases"]
    assert ph["draft"] == {"mean_ms": 2.0, "p50_ms": 2.0, "p90_ms": 2.0}
    assert ph["verify"]["mean_ms"] == 28.0 and ph["extend"]["mean_ms"] == 1.0
    assert ph["other"]["mean_ms"] == 0.5 and ph["cycle"]["mean_ms"] == 31.5
    assert r["eff_tok_s"] == round(2.8 * 1000 / 31.5, 2)
    assert r["spec"] == {"steps": 3, "topk": 1, "draft_tokens": 4} and r["route"] == "source-patch"
    assert r["sglang_version"]  # the installed SGLang (0.5.23 in the dev env)

    # the same numbers come back from the JSONL and from the printed blocks
    err = capsys.readouterr().err
    assert err.count("EAGLE3_PROF (") == 2 and "Accept len:      2.80 (incl. bonus)" in err
    log = tmp_path / "server.log"
    log.write_text("[2026 TP0] some server line\n" + err)
    for run in (prof_records.load(tmp_path / "prof.jsonl"), prof_records.load(log)):
        s = accounting.summarize(run, all_windows=True)  # the round trip keeps every window
        assert s["windows"] == 2 and s["cycles"] == 20
        assert s["accept_len"] == 2.8
        assert s["per_position"] == pytest.approx([0.8, 0.75, 0.6667], abs=5e-4)  # block: 3 decimals
        assert s["phases"]["verify"]["mean_ms"] == 28.0 and s["phases"]["cycle"]["mean_ms"] == 31.5
        assert s["spec"] == {"steps": 3, "topk": 1, "draft_tokens": 4} and s["mode"] == "events"
        assert not s["legacy"] and s["notes"] == []


def test_events_mode_syncs_once_per_window_not_per_cycle(tmp_path, capsys):
    clock = Clock()
    fake = timers.FakeEventTimer(clock)
    probes.reset(environ=on(tmp_path), backend=fake)
    drive(clock, 35, [[1]] * 35)
    # 35 closed cycles -> 3 windows of 10 read, 5 cycles still open in the buffer
    assert len(probes.windows) == 3
    assert fake.syncs == 3
    assert fake.records == 35 * 8 + 1 + 3  # 8 marks/cycle, the closing begin, a fresh mark per window
    assert fake.pool_size <= 2 * (10 * 8 + 2)  # two pools reused in turn, not grown per cycle
    rec = probes.flush()
    assert rec is not None and rec["cycles"] == 5 and fake.syncs == 4


EXPECTED_MS = {"draft": 2.0, "verify": 28.0, "extend": 1.0, "other": 0.5, "cycle": 31.5}


def _means(rec: dict) -> dict[str, float]:
    return {k: rec["phases"][k]["mean_ms"] for k in EXPECTED_MS}


def test_events_windows_are_read_once_the_gpu_passed_them_never_waiting(tmp_path, capsys):
    """The "GPU" runs 5 ms behind the host: a window cannot be read at its boundary without a
    stall, so it is read at the next cycle (query() says done) and no wait ever blocks; the pool
    holding it is not re-recorded before then (the numbers would be wrong otherwise)."""
    clock = Clock()
    fake = timers.FakeEventTimer(clock, lag=0.005)
    probes.reset(environ=on(tmp_path), backend=fake)
    drive(clock, 35, [[1]] * 35)
    assert [r["window"] for r in probes.windows] == [1, 2, 3]
    assert fake.blocked == 0
    assert all(_means(r) == EXPECTED_MS and r["cycles"] == 10 for r in probes.windows)
    assert all(r["probe_wait_ms"] >= 0 and r["probe_read_ms"] > 0 for r in probes.windows)
    rec = probes.flush()  # interpreter exit / explicit flush: the partial window, read now
    assert rec["window"] == 4 and rec["cycles"] == 5 and _means(rec) == EXPECTED_MS
    lines = (tmp_path / "prof.jsonl").read_text().splitlines()
    assert [json.loads(x)["window"] for x in lines] == [1, 2, 3, 4]


def test_events_window_still_unfinished_a_window_later_is_waited_for(tmp_path, capsys):
    """A GPU a whole window behind: window k is read (with a wait) when window k+1 closes, and
    flush reads the rest, in order."""
    clock = Clock()
    fake = timers.FakeEventTimer(clock, lag=1000.0)
    probes.reset(environ=on(tmp_path), backend=fake)
    drive(clock, 35, [[1]] * 35)
    assert [r["window"] for r in probes.windows] == [1, 2] and fake.blocked == 2
    probes.flush()
    assert [r["window"] for r in probes.windows] == [1, 2, 3, 4]
    assert all(_means(r) == EXPECTED_MS for r in probes.windows)


def test_events_defer_off_reads_at_the_boundary(tmp_path, capsys):
    """EAGLE3_PROFILE_DEFER=0: read at the boundary, one blocking wait per window."""
    clock = Clock()
    fake = timers.FakeEventTimer(clock, lag=0.005)
    probes.reset(environ=on(tmp_path, EAGLE3_PROFILE_DEFER="0"), backend=fake)
    drive(clock, 35, [[1]] * 35)
    assert [r["window"] for r in probes.windows] == [1, 2, 3] and fake.blocked == 3
    assert all(_means(r) == EXPECTED_MS for r in probes.windows)


def test_sync_mode_synchronizes_at_every_boundary():
    calls = []
    probes.reset(environ=on(), backend=timers.SyncTimer(lambda: calls.append(1)))
    for _ in range(3):
        probes.cycle_begin()
        probes.phase_begin("verify")
        probes.phase_end("verify")
        probes.cycle_end()
    assert len(calls) == 3 * 4


def test_late_accept_counts_bonus_included_and_idle_gap(tmp_path, capsys):
    clock = Clock()
    # V2: counts include the bonus and arrive one cycle late; windows sum what arrived
    probes.reset(environ=on(tmp_path, EAGLE3_PROFILE_SPEC="2,1,3"), backend=timers.FakeEventTimer(clock))
    drive(clock, 10, [[3, 1]] * 10, bonus_included=True, late=True)
    r = probes.windows[0]
    assert r["requests"] == 18 and r["accepted_drafts"] == 18 and r["accept_len"] == 2.0
    assert r["per_position"] == [0.5, 1.0]

    # an idle scheduler between cycles must not inflate "other"
    clock = Clock()
    probes.reset(environ=on(tmp_path, EAGLE3_PROFILE_IDLE_MS="0"), backend=timers.FakeEventTimer(clock))
    drive(clock, 10, [[1]] * 10, tail=500.0)
    r = probes.windows[0]
    assert r["idle_cycles"] == 10 and r["phases"]["cycle"]["mean_ms"] == 31.0
    assert r["phases"]["other"]["mean_ms"] == 0.0


def test_every_rank_writes_its_own_stream_rank0_prints(tmp_path, capsys, monkeypatch):
    """TP rank N > 0 appends to <out>.rankN (rank in every record) and prints no block (the ranks
    share one server log); with deferred reads it waits on its GPU no more than rank 0 does."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    clock = Clock()
    fake = timers.FakeEventTimer(clock)
    probes.reset(environ=on(tmp_path), backend=fake)
    drive(clock, 25, [[1]] * 25)
    assert not (tmp_path / "prof.jsonl").exists()
    recs = [json.loads(x) for x in (tmp_path / "prof.jsonl.rank1").read_text().splitlines()]
    assert [(r["rank"], r["tp_size"], r["window"]) for r in recs] == [(1, 2, 1), (1, 2, 2)]
    assert list(probes.windows) == recs
    assert "EAGLE3_PROF" not in capsys.readouterr().err
    assert fake.blocked == 0

    monkeypatch.setenv("RANK", "0")
    probes.reset(environ=on(tmp_path), backend=timers.FakeEventTimer(clock))
    drive(clock, 10, [[1]] * 10)
    assert probes.windows[0]["rank"] == 0 and probes.windows[0]["tp_size"] == 2
    assert json.loads((tmp_path / "prof.jsonl").read_text())["rank"] == 0
    assert "rank 0" in capsys.readouterr().err


def test_bad_settings_warn_and_fall_back(capsys):
    s = probes.settings({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "zero",
                         "EAGLE3_PROFILE_MODE": "gpu", "EAGLE3_PROFILE_SPEC": "5,1"})
    assert s["every"] == 100 and s["mode"] == "auto" and s["spec"]["steps"] is None
    err = capsys.readouterr().err
    assert "EAGLE3_PROFILE_EVERY" in err and "EAGLE3_PROFILE_MODE" in err and "EAGLE3_PROFILE_SPEC" in err
    assert probes.settings({"EAGLE3_PROFILE_SPEC": "5,1,6"})["spec"] == {"steps": 5, "topk": 1, "draft_tokens": 6}
    assert probes.settings({})["enabled"] is False and probes.settings({"EAGLE3_PROFILE": "off"})["enabled"] is False


def test_events_without_cuda_falls_back_to_wall_and_says_so(capsys):
    if timers.cuda_available():
        pytest.skip("CUDA present: the fallback is not taken")
    probes.reset(environ=on(EAGLE3_PROFILE_MODE="events"))
    for _ in range(11):
        probes.cycle_begin()
        probes.cycle_end()
    r = probes.windows[0]
    assert r["mode"] == "wall" and r["mode_requested"] == "events"
    assert any("needs CUDA" in n for n in r["notes"])
    assert "timing mode 'events' needs CUDA" in capsys.readouterr().err


def test_tensor_like_counts_and_unbalanced_phases(tmp_path, capsys):
    """Counts may come as anything with .tolist() (a CPU tensor); stray phase calls are dropped."""
    import array

    clock = Clock()
    probes.reset(environ=on(), backend=timers.FakeEventTimer(clock))
    probes.phase_begin("draft")  # before any cycle: ignored
    probes.phase_end("draft")
    for _ in range(10):
        probes.cycle_begin()
        probes.phase_end("verify")  # an end without a begin: dropped
        probes.phase_begin("draft")
        clock.ms(2.0)
        probes.phase_end("draft")
        probes.phase_begin("draft")  # a second draft in one cycle (0.5.23 PP tail draft): summed
        clock.ms(1.0)
        probes.phase_end("draft")
        probes.record_accept(array.array("i", [3, 1]), bonus_included=True)
        probes.cycle_end()
    probes.cycle_begin()
    r = probes.windows[0]
    assert r["phases"]["draft"]["mean_ms"] == 3.0 and r["phases"]["verify"]["mean_ms"] == 0.0
    assert r["accept_hist"] == {"0": 10, "2": 10} and r["accept_len"] == 2.0


def test_flush_mid_cycle_keeps_the_open_cycle_start():
    clock = Clock()
    fake = timers.FakeEventTimer(clock)
    probes.reset(environ=on(), backend=fake)
    drive(clock, 3, [[1]] * 3)  # ends with an open cycle (begun, no cycle_end)
    assert probes.flush()["cycles"] == 3
    clock.ms(5.0)
    probes.cycle_end()
    drive(clock, 10, [[1]] * 10, draft=1.0, verify=1.0, extend=1.0, tail=0.0)
    # the open cycle: 5 ms, then 10 cycles of 3 ms; its start mark survived the pool reset
    assert probes.windows[-1]["cycles"] == 10
    assert probes.windows[-1]["phases"]["cycle"]["p50_ms"] == 3.0
    assert probes.windows[-1]["phases"]["cycle"]["mean_ms"] == pytest.approx((5.0 + 9 * 3.0) / 10)


def test_toggle_signal_pauses_and_resumes_a_live_process(tmp_path, capsys):
    """EAGLE3_PROFILE_TOGGLE=SIGUSR2 (a real signal to this process): paused, probe calls do
    nothing; resumed, a fresh profiler with the same settings records again; the paused
    profiler's last partial window is written at the resume."""
    import os
    import signal

    out = tmp_path / "prof.jsonl"
    probes.reset(environ=on(tmp_path, EAGLE3_PROFILE_TOGGLE="usr2", EAGLE3_PROFILE_EVERY="5",
                            EAGLE3_PROFILE_MODE="wall"))
    old = signal.getsignal(signal.SIGUSR2)
    try:
        assert old is probes._on_toggle

        def cycles(n: int) -> None:
            for _ in range(n):
                probes.cycle_begin()
                probes.phase_begin("verify")
                probes.phase_end("verify")
                probes.record_accept([1], bonus_included=False)
                probes.cycle_end()

        cycles(12)  # 11 closed cycles: 2 windows, 1 cycle collected, 1 open
        assert len(probes.windows) == 2
        os.kill(os.getpid(), signal.SIGUSR2)
        assert not probes.enabled()
        cycles(20)  # paused: nothing recorded
        os.kill(os.getpid(), signal.SIGUSR2)
        assert probes.enabled()
        cycles(11)
        recs = [json.loads(x) for x in out.read_text().splitlines()]
        assert [(r["window"], r["cycles"]) for r in recs] == [(1, 5), (2, 5), (3, 2), (1, 5), (2, 5)]
        err = capsys.readouterr().err
        assert "paused by signal" in err and "resumed by signal" in err
    finally:
        probes.reset(environ={})
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)


def test_toggle_signal_bad_value_warns_and_installs_nothing(capsys):
    import signal

    probes.reset(environ=on(EAGLE3_PROFILE_TOGGLE="SIGTERM"))
    assert "not SIGUSR1 or SIGUSR2" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is not probes._on_toggle
