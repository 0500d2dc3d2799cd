"""Step control inside SGLang: an outside decider chooses the step count of every decode cycle of
SGLang's adaptive controller (0.5.13+), in place of SGLang's own EMA.

The plugin hooks (AROUND) ``AdaptiveController.init_states`` (builds and installs the decider once
the states exist), ``.activate_step_by_batch`` (``decider.choose`` once per decode cycle, before
the forward; ``_activate`` only when the choice differs; the original is not called) and
``.on_verify_complete`` (``decider.observe``; the original EMA update is not called, so SGLang never
switches meanwhile). Decisions must be a pure function of events identical on every TP rank
(decode-cycle counts, batch sizes, accept counts): never wall time, probe windows or signals.

Stdlib only at module level (it runs in SGLang's scheduler processes); the hooks never raise into
SGLang once serving (a failing decider falls back to SGLang's own rule), but refuse to start, with
the reason, when asked for something this release or this rank cannot do. docs/reference/plugin.md.
"""

from __future__ import annotations

import ast
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import settings, specstate
from .specstate import Key

ADAPTIVE_FILE = "srt/speculative/adaptive_runtime_state.py"
CONTROLLER = "AdaptiveController"
MODULE = "sglang.srt.speculative.adaptive_runtime_state"

logger = logging.getLogger("sglang_eagle3_ext.plugin")  # the plugin's stderr logger


class Decider(Protocol):
    """Chooses a state key per decode cycle: an int step count (a chain, SGLang's own key) or a
    tree label ``"5x4x21"`` (specstate.py) when trees are held beside the chains."""

    name: str  # "hold" | "policy" (recorded in probe records)

    def choose(self, batch_size: int, current: Key, built: Sequence[Key]) -> Key: ...

    def observe(self, correct_drafts_per_req: Sequence[int], batch_size: int, steps: Key) -> None: ...


_installed: Decider | None = None


def install(decider: Decider | None) -> None:
    """The plugin's step-control hooks call this decider (None: uninstall, SGLang decides)."""
    global _installed
    _installed = decider
    _pending.clear()


def installed() -> Decider | None:
    return _installed


def current_block() -> int:
    """The installed decider's block id of its last choice (-1: none holds)."""
    d = _installed
    b = getattr(d, "block", None) if d is not None else None
    return b if isinstance(b, int) else -1


def control() -> dict[str, Any]:
    """The probe records' ``control`` head (choices are filled by the probes from the tags)."""
    d = _installed
    if d is None:
        return {"decider": None, "block": None, "candidates": None}
    cands = getattr(d, "candidates", None)
    b = current_block()
    head = {"decider": getattr(d, "name", "?"), "block": b if b >= 0 else None,
            "candidates": list(cands) if cands is not None else None}
    extra = getattr(d, "window_control", None)  # the policy: what it expected of its choices
    if callable(extra):
        try:
            head["policy"] = extra()
        except Exception as exc:  # noqa: BLE001 - reporting only, never into SGLang
            _warn_once("control", "step control: %s report failed (%s)", getattr(d, "name", "?"), exc)
    return head


# ------------------------------------------------------------------------------------------------
# Which state produced a verify result: under the overlap scheduler SGLang processes the result of
# batch N while batch N+1 runs, so the verify side sees the previous batch. Every choose queues
# (batch size, state key); every observe takes the oldest entry of its batch size. Keys, not step
# counts: chain 3 and tree 3x4x8 both have 3 steps.

class Pending:
    def __init__(self, maxlen: int = 8) -> None:
        self._q: deque[tuple[int, Key]] = deque(maxlen=maxlen)

    def clear(self) -> None:
        self._q.clear()

    def push(self, batch_size: int, steps: Key) -> None:
        self._q.append((batch_size, steps))

    def take(self, batch_size: int) -> Key | None:
        """The state of the oldest queued cycle of this batch size (older ones of another size got
        no verify result and are dropped); None when none is queued."""
        q = self._q
        for i, (bs, steps) in enumerate(q):
            if bs == batch_size:
                for _ in range(i + 1):
                    q.popleft()
                return steps
        return None


_pending = Pending()


# ------------------------------------------------------------------------------------------------
# What the live controller offers (read once, after init_states built every state)

@dataclass(frozen=True)
class ControllerInfo:
    built: tuple[Key, ...]  # state keys with a runtime state: chains (int steps), then trees
    tiers: dict[int, tuple[int, ...]] = field(default_factory=dict)  # tier batch size -> candidates
    cuda_graph_bs: tuple[int, ...] | None = None  # sorted, None when graphs are off
    current: Key | None = None
    tree_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # tree -> padded bs range

    def eligible(self, level: int, key: Key) -> bool:
        """May ``key`` run at this level (padded batch size)? Chains everywhere; a tree only
        inside the range it has CUDA graphs for (outside it would run eager, silently slower)."""
        r = self.tree_ranges.get(key) if isinstance(key, str) else None
        return r is None or r[0] <= level <= r[1]

    def level_of(self, batch_size: int) -> int:
        """The batch size padded to the next CUDA-graph size, as SGLang routes it (0.5.16
        adaptive_spec_params.py ``_pad_to_cuda_graph_bs``): one hold counter per level."""
        g = self.cuda_graph_bs
        if not g:
            return batch_size
        for v in g:
            if v >= batch_size:
                return v
        return batch_size


def controller_info(ctrl: Any) -> ControllerInfo:
    states = getattr(ctrl, "_states", None) or {}
    params = getattr(ctrl, "params", None)
    tiers: dict[int, tuple[int, ...]] = {}
    for bs, slot in (getattr(params, "_slots", None) or {}).items():
        try:
            tiers[int(bs)] = tuple(int(s) for s in slot.candidate_steps)
        except Exception:  # noqa: BLE001 - an unknown slot shape: no tier for it
            continue
    g = getattr(params, "_cuda_graph_bs", None)
    ranges = {t.state.label: (t.lo, t.hi) for t in (getattr(ctrl, "_eagle3_trees", None) or ())}
    return ControllerInfo(built=tuple(specstate.sort_keys(states)), tiers=tiers,
                          cuda_graph_bs=tuple(sorted(int(x) for x in g)) if g else None,
                          current=current_key(getattr(ctrl, "worker", None)), tree_ranges=ranges)


def current_key(worker: Any) -> Key | None:
    """The key of the state the worker runs now: its step count for a chain, its label for a tree
    (topk > 1). None when the worker has no step count."""
    steps = getattr(worker, "speculative_num_steps", None)
    if not isinstance(steps, int):
        return None
    topk = getattr(worker, "topk", 1)
    if isinstance(topk, int) and topk > 1:
        return specstate.State(steps, topk, int(getattr(worker, "speculative_num_draft_tokens", 0))).label
    return steps


# ------------------------------------------------------------------------------------------------
# Per release: can a decider hold step counts here? (pure: reads the release source with ast)

def _controller_methods(env: Any) -> set[str] | None:
    path = env.path(ADAPTIVE_FILE)
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == CONTROLLER:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return None


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def plan(env: Any) -> dict[str, Any]:
    """What step control can do on this release: ``ok``, ``reason`` (one line), ``step0`` (a held 0
    is allowed), ``tiers`` and the hook ``targets``. For the CLI (``scan``) and the plugin."""
    v = str(getattr(env, "version", "?"))
    methods = _controller_methods(env)
    out: dict[str, Any] = {"version": v, "ok": False, "reason": "", "step0": False, "tiers": False,
                           "targets": []}
    if methods is None:
        out["reason"] = (f"SGLang {v} has no adaptive speculative runtime ({ADAPTIVE_FILE}, 0.5.12+): "
                         "one server cannot hold several step counts; use `sgl-eagle3 sweep` (one "
                         "server per step count)")
        return out
    need = {"init_states", "activate_step_by_batch", "on_verify_complete", "_activate"}
    if "activate_step_by_batch" not in methods:
        out["reason"] = (f"SGLang {v}: the adaptive controller switches only from the verify side (one "
                         "slot, no tiers) and a switch lands two batches later, so cycles cannot be held "
                         "and attributed exactly; use SGLang 0.5.13+ or `sgl-eagle3 sweep`")
        return out
    missing = sorted(need - methods)
    if missing:
        out["reason"] = f"SGLang {v}: {CONTROLLER} lacks {', '.join(missing)}; step control is not compiled"
        return out
    step0 = _version_tuple(v) >= (0, 5, 16)
    out.update(ok=True, tiers=True, step0=step0,
               targets=[f"{MODULE}.{CONTROLLER}.{m}" for m in ("init_states", "activate_step_by_batch",
                                                                "on_verify_complete")],
               reason=f"SGLang {v}: held step counts per tier" + (", step 0 included" if step0 else
                                                                   " (steps >= 1: its loader refuses 0)"))
    return out


def support(env: Any) -> tuple[bool, str]:
    """(ok, one-line reason) for holding step counts in one server of this release."""
    p = plan(env)
    return bool(p["ok"]), str(p["reason"])


def requested(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(decider name asked for or None, refusal reason or None), from the environment."""
    hold, policy = settings.HOLD.is_set(environ), settings.POLICY.is_set(environ)
    if hold and policy:
        return "hold", (f"{settings.HOLD.name} and {settings.POLICY.name} are both set: one decider holds "
                        "the step count; unset one")
    if hold:
        value, problem = settings.HOLD.read(environ)
        if problem or value is None:
            return "hold", problem or f"{settings.HOLD.name} is not a positive integer"
        _, problem = settings.HOLD_STEPS.read(environ)
        return "hold", problem
    if policy:
        return "policy", None
    return None, None


# ------------------------------------------------------------------------------------------------
# Building the decider (once per process, from the live controller)

def make_decider(name: str, info: ControllerInfo, environ: Mapping[str, str] | None = None) -> Decider:
    """The decider ``name`` for this controller; raises ValueError with the reason (the init hook
    turns it into a refusal to start)."""
    if name == "hold":
        from . import hold

        return hold.from_settings(info, environ)
    if name == "policy":
        import importlib

        try:
            mod = importlib.import_module("sglang_eagle3_ext.runtime.policy")
        except ImportError as exc:
            raise ValueError(f"{settings.POLICY.name} is set but the policy decider is not installed "
                             f"({exc})") from None
        path, problem = settings.POLICY.read(environ)
        if problem:  # e.g. "~nouser/x": the reason, not "the policy needs a scan result file"
            raise ValueError(problem)
        return mod.make_decider(info, path)  # type: ignore[no-any-return]
    raise ValueError(f"unknown decider {name!r}")


# ------------------------------------------------------------------------------------------------
# The hooks (AROUND, applied through SGLang's HookRegistry by the plugin)

_warned: set[str] = set()


def _warn_once(key: str, msg: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.error(msg, *args)


def init_hook(name: str, check: Callable[[], list[str]], refuse: str | None = None
              ) -> Callable[..., Any]:
    """Around ``init_states``: after SGLang built every state, build and install the decider.
    Raises (the server refuses to start, saying why) when ``refuse`` is given, when this rank lacks
    a step-control hook (``check`` names the missing targets) or when the decider cannot be built."""

    def init_states(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        if refuse:
            raise RuntimeError(f"sglang-eagle3-ext: {refuse}")
        out = original(self, *args, **kwargs)
        missing = check()
        if missing:
            raise RuntimeError("sglang-eagle3-ext: step control needs its hooks on every rank; not applied "
                               f"in this process: {', '.join(missing)}")
        from . import treeswitch

        if treeswitch.active():  # trees beside SGLang's chains, before the decider sees the states
            try:
                treeswitch.build_trees(self)
            except ValueError as exc:
                raise RuntimeError(f"sglang-eagle3-ext: {exc}") from None
        info = controller_info(self)
        try:
            decider = make_decider(name, info)
        except ValueError as exc:
            raise RuntimeError(f"sglang-eagle3-ext: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - whatever the input did: one line, the server refuses
            raise RuntimeError(f"sglang-eagle3-ext: {name} decider not built ({type(exc).__name__}: "
                               f"{str(exc)[:200]})") from None
        install(decider)
        logger.info("step control: %s decider installed (%s)", name, getattr(decider, "describe", lambda: "")())
        return out

    return init_states


def activate_hook(original: Callable[..., Any], self: Any, batch_size: int, *args: Any, **kwargs: Any) -> Any:
    d = _installed
    if d is None:
        return original(self, batch_size, *args, **kwargs)
    try:
        built = specstate.sort_keys(self._states)
        current = current_key(self.worker)
        target = d.choose(int(batch_size), current, built)
        if target not in self._states:
            raise ValueError(f"its choice, {'state' if isinstance(target, str) else 'steps'} {target}, has no runtime state (built: {built}); SGLang's "
                             "own _activate raises 'Missing adaptive runtime state' for it")
    except Exception as exc:  # noqa: BLE001 - never raise into SGLang: its own rule decides
        _warn_once("choose", "step control: %s decider failed (%s); SGLang's own rule decides from now on",
                   getattr(d, "name", "?"), exc)
        install(None)
        return original(self, batch_size, *args, **kwargs)
    _pending.push(int(batch_size), target)
    if target != current:
        self._activate(target)
    return None


def verify_hook(original: Callable[..., Any], self: Any, num_correct_drafts_per_req: Any,
                batch_size: int = 0, *args: Any, **kwargs: Any) -> Any:
    d = _installed
    if d is None:
        return original(self, num_correct_drafts_per_req, batch_size, *args, **kwargs)
    try:
        counts = list(num_correct_drafts_per_req or ())
        bs = int(batch_size) or len(counts)
        steps = _pending.take(bs)
        if steps is None:
            steps = current_key(self.worker)
        d.observe(counts, bs, steps)
    except Exception as exc:  # noqa: BLE001 - an observer failure never reaches SGLang
        _warn_once("observe", "step control: %s decider observe failed (%s)", getattr(d, "name", "?"), exc)
    return None  # SGLang's EMA is not updated: it never switches while a decider holds
