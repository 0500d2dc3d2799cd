"""Probes runtime: the only API that patched SGLang code and the plugin call.

Per decode cycle it times draft / verify / extend (+ "other" = cycle minus phases), counts the
tokens accepted (incl. the bonus token) and the acceptance per draft position, and every
``EAGLE3_PROFILE_EVERY`` cycles prints the EAGLE3_PROF block (stderr -> server log) and appends one
``eagle3_prof/3`` JSONL record (every TP rank its own file; the block from rank 0). See docs/guide/profiling.md.

With ``EAGLE3_PROFILE`` unset (read once at import) every call returns at once: no torch import,
no torch call, no allocation. ``reset()`` re-reads the environment (tests, demo).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from .. import settings as env  # stdlib only: the one declaration of every variable

__all__ = [
    "enabled", "cycle_begin", "phase_begin", "phase_end", "cycle_end", "record_accept", "mark_boundary",
    "set_spec_config", "tag_cycle", "flush", "reset", "trace", "windows", "settings",
]

MODES = env.PROFILE_MODES

# In-process observers (tests, demo): the trace list (EAGLE3_PROFILE_TRACE=1) and the records
# of every window this process emitted (any rank), newest last.
trace: list[tuple[str, Any]] = []
windows: deque[dict[str, Any]] = deque(maxlen=1000)


def _warn(msg: str) -> None:
    sys.stderr.write(f"EAGLE3_PROF warning: {msg}\n")
    sys.stderr.flush()


def settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The probe settings an environment asks for, read through ``sglang_eagle3_ext.runtime.settings``
    (names, types, defaults). Bad values warn (when the probes are on) and fall back: a typo in
    an env var must never take a serving process down."""
    on, bad = env.PROFILE.read(environ)
    on = bool(on)
    if bad:  # "garbage", "disable": off (the default), and said, never silently on
        _warn(bad)

    def get(s: env.Setting) -> Any:
        value, problem = s.read(environ)
        if problem and on:
            _warn(problem)
        return value

    spec = get(env.PROFILE_SPEC)
    return {
        "enabled": on,
        "every": get(env.PROFILE_EVERY),
        "mode": get(env.PROFILE_MODE),
        "out": get(env.PROFILE_OUT),
        "trace": bool(get(env.PROFILE_TRACE)),
        "spec": dict(spec) if spec else {"steps": None, "topk": None, "draft_tokens": None},
        "route": get(env.PROFILE_ROUTE),
        "idle_ms": get(env.PROFILE_IDLE_MS),
        # events: read each window once the GPU has passed it (default), or "0": at its boundary,
        # waiting for the GPU (the earlier behaviour, kept to measure what deferring saves)
        "defer": bool(get(env.PROFILE_DEFER)),
        "toggle": get(env.PROFILE_TOGGLE),
    }


_atexit_registered = False
_P: Any = None  # the Profiler when enabled, else None: the one check on the hot path
_paused: Any = None  # the Profiler a toggle signal paused, written out at the next toggle or exit
_settings: dict[str, Any] | None = None  # what the last reset() read: a resumed profiler reuses it


def enabled() -> bool:
    return _P is not None


def cycle_begin() -> None:
    p = _P
    if p is None:
        return
    p.cycle_begin()


def phase_begin(name: str) -> None:
    p = _P
    if p is None:
        return
    p.phase_begin(name)


def phase_end(name: str) -> None:
    p = _P
    if p is None:
        return
    p.phase_end(name)


def cycle_end() -> None:
    p = _P
    if p is None:
        return
    p.cycle_end()


def mark_boundary(reason: str = "extend") -> None:
    """A non-decode forward (prefill, the draft's extend) of the speculative worker starts now.

    Called on the non-decode path of forward_batch_generation by both routes. It marks the open
    decode cycle (whose "other" will hold this forward) and the next one (the first decode of
    the request it admitted) as boundary cycles: steady figures leave both out.
    """
    p = _P
    if p is None:
        return
    p.mark_boundary(reason)


def record_accept(per_req: Iterable[int], *, bonus_included: bool) -> None:
    """Accepted counts of one verify, one int per request (a CPU list; never a GPU tensor).

    ``bonus_included=False``: accepted draft tokens (V1 ``accept_length_per_req_cpu``, V2
    ``on_verify_complete_cpu``); ``True``: drafts + bonus (V2 ``accept_lens``). May arrive one
    cycle late (overlap scheduler): windows just sum what arrived.
    """
    p = _P
    if p is None:
        return
    p.record_accept(per_req, bonus_included)


def tag_cycle(steps: int | None, topk: int | None, draft_tokens: int | None, batch_size: int | None,
              graph: bool | None = None, block: int = -1) -> None:
    """The configuration that ran the open decode cycle, read after the worker's own switch (the
    plugin calls it after the original returns). Untagged cycles keep the spec of set_spec_config /
    EAGLE3_PROFILE_SPEC and the batch size of their accept counts (the source-patch route)."""
    p = _P
    if p is None:
        return
    p.tag_cycle(steps, topk, draft_tokens, batch_size, graph, block)


def set_spec_config(steps: int | None = None, topk: int | None = None,
                    draft_tokens: int | None = None, route: str | None = None) -> None:
    p = _P
    if p is None:
        return
    if route == "source-patch":  # a patched file's import block: once, can this tree record at all?
        _check_source_route()
    p.set_spec_config(steps, topk, draft_tokens, route)


_route_checked: list[bool] = []


def _check_source_route() -> None:
    """Say at start, in the server's log, when the tree's source patch holds no decode probes and
    no plugin can time the cycles (SGLang < 0.5.11 with e.g. only an accept entry patched): else
    profiling would record nothing, with no word (issue 34 case 13). Never raises into SGLang."""
    if _route_checked:
        return
    _route_checked.append(True)
    try:
        from ..routes import probe_route, source_coverage
        from ..sglang_env import locate

        env = locate()
        d = probe_route(source_coverage(env), plugin_ok=bool(env.has_plugins))
        if d["problem"]:
            sys.stderr.write(f"sglang-eagle3-ext: {d['problem']}\n")
            sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a check for the log, never a failure of SGLang
        pass


def flush() -> dict[str, Any] | None:
    """Emit the current partial window now (also done at interpreter exit); returns its record."""
    p = _P
    if p is None:
        return None
    return p.flush()


def reset(*, backend: Any = None, environ: Mapping[str, str] | None = None) -> None:
    """Forget all state and re-read the environment (or ``environ``).

    ``backend`` replaces the timer backend (see ``probes.timers``), e.g. a ``FakeEventTimer`` to
    exercise ``events`` mode without CUDA.
    """
    global _P, _paused, _settings
    _paused = None
    trace.clear()
    windows.clear()
    s = _settings = settings(environ)
    if not s["enabled"]:
        _P = None
        return
    _start(s, backend)
    if s["toggle"]:
        _install_toggle(s["toggle"])
    global _atexit_registered
    if not _atexit_registered:
        import atexit

        atexit.register(_at_exit)
        _atexit_registered = True


def _start(s: dict[str, Any], backend: Any = None) -> None:
    global _P
    from ._profiler import Profiler, TracingProfiler

    cls = TracingProfiler if s["trace"] else Profiler
    _P = cls(s, backend=backend, sink=windows, trace=trace)


def _install_toggle(name: str) -> None:
    """EAGLE3_PROFILE_TOGGLE=SIGUSR2: that signal pauses / resumes the probes of a live process
    (profile a slice of traffic; A/B the probes' cost on one server). Python runs the handler in
    the main thread between bytecodes, possibly in the middle of a probe call: so pausing only
    swaps the profiler out (the interrupted call finishes on the old object, which is written out
    at the next toggle), and resuming builds a fresh one."""
    import signal
    import threading

    if signal.getsignal(getattr(signal, name)) is _on_toggle:
        return
    if threading.current_thread() is not threading.main_thread():
        _warn(f"EAGLE3_PROFILE_TOGGLE={name}: probes started outside the main thread; no toggle signal")
        return
    try:
        signal.signal(getattr(signal, name), _on_toggle)
    except (ValueError, OSError, AttributeError) as exc:
        _warn(f"EAGLE3_PROFILE_TOGGLE={name}: cannot install the handler ({exc})")


def _on_toggle(signum: int, frame: Any) -> None:
    global _P, _paused
    if _P is not None:
        _P, _paused = None, _P
        _warn("paused by signal (probe calls are no-ops until the next one)")
        return
    old, _paused = _paused, None
    if old is not None:
        _flush_quietly(old, 1)
    if _settings is not None:
        _start(_settings)  # the settings it was started with; a fresh timer backend
        _warn("resumed by signal")


def _flush_quietly(p: Any, min_cycles: int) -> None:
    try:
        p.flush(min_cycles=min_cycles)
    except Exception as exc:  # noqa: BLE001 - never take the host process down
        _warn(f"last window not written: {exc}")


def _at_exit() -> None:
    for p in (_paused, _P):
        if p is not None:
            _flush_quietly(p, 10)


if env.PROFILE.get():
    reset()
