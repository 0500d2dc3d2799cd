"""The AROUND hooks themselves: the decode cycle, its phases, accept counts, the aux-layer funnel and the TP all-reduce report. Never raise into SGLang."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import stepctl
from . import procstate
from .apply_check import _stepctl_missing, verify
from .hookplan import Hook
from .procstate import _probes, logger

# ------------------------------------------------------------------------------------------------
# The hooks

def _make_hook(hook: Hook) -> Callable[..., Any]:
    if hook.role == "cycle":
        return _cycle_hook(hook.detail)
    if hook.role in ("draft", "extend"):
        return _phase_hook(hook.role)
    if hook.role == "verify":
        field = hook.detail.get("field")  # V1: the verify_output field of this release (v1.yaml)
        return _verify_v1_hook(field) if field else _phase_hook("verify")
    if hook.role == "accept":  # accept.yaml accept_hook: read the parameter, or the result's fields
        if hook.detail.get("read") == "param":
            return _accept_param_hook()
        return _accept_result_hook(tuple(f for f in hook.detail.get("fields", "").split(",") if f))
    if hook.role == "aux":
        return _aux_hook(hook.detail["style"])
    if hook.role == "allreduce":
        return _allreduce_hook
    if hook.role == "stepctl-init":
        return stepctl.init_hook(hook.detail["decider"], _stepctl_missing, hook.detail.get("refuse"))
    if hook.role == "stepctl-activate":
        return stepctl.activate_hook
    if hook.role == "stepctl-verify":
        return stepctl.verify_hook
    if hook.family == "trees":
        from .. import treeswitch

        return treeswitch.hook_for(hook.role, hook.target)
    raise ValueError(f"unknown hook role {hook.role}")


def _is_decode(batch: Any, rule: dict[str, str]) -> bool:
    """The branch the original will take, by the same test the release uses; idle (DP attention
    padding) batches are not cycles."""
    try:
        mode = batch.forward_mode
        if rule["rule"] == "is_decode":
            decode = bool(mode.is_decode())
        else:
            decode = not (mode.is_extend() or (rule.get("extend_in_batch") == "true" and batch.is_extend_in_batch))
        return decode and not mode.is_idle()
    except Exception:  # noqa: BLE001 - an unexpected batch shape: just do not record
        return False


def _is_idle(batch: Any) -> bool:
    try:
        return bool(batch.forward_mode.is_idle())
    except Exception:  # noqa: BLE001 - an unexpected batch shape: treat as nothing happened
        return True


def _cycle_hook(rule: dict[str, str]) -> Callable[..., Any]:
    arg = rule["arg"]

    def cycle(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
        batch = args[0] if args else kwargs.get(arg)
        if procstate._S.depth:
            return original(self, *args, **kwargs)
        if not _is_decode(batch, rule):
            if not _is_idle(batch):  # a prefill / extend: the cycles around it are boundaries
                _probes().mark_boundary("extend")
            return original(self, *args, **kwargs)
        probes = _probes()
        if procstate._S.missing is None:
            verify()
        if not procstate._S.stepctl_checked:  # once: by the first decode cycle init_states has run, if ever
            procstate._S.stepctl_checked = True
            if any(h.family == "stepctl" for h in procstate._S.registered) and stepctl.installed() is None:
                logger.error("step control was asked for but no adaptive controller built its states: "
                             "start SGLang with --speculative-adaptive (steps are not held)")
        spec = (getattr(self, "speculative_num_steps", None), getattr(self, "topk", None),
                getattr(self, "speculative_num_draft_tokens", None))
        if spec != procstate._S.spec:  # adaptive steps change at runtime
            procstate._S.spec = spec
            probes.set_spec_config(*spec, route="plugin")
        procstate._S.depth += 1
        probes.cycle_begin()
        try:
            out = original(self, *args, **kwargs)
            _tag(probes, self, batch, out)
            return out
        finally:
            probes.cycle_end()
            procstate._S.depth -= 1

    return cycle


def _batch_size(batch: Any) -> int | None:
    try:
        return int(batch.seq_lens.shape[0])  # what activate_step_by_batch is given (0.5.13+)
    except Exception:  # noqa: BLE001
        try:
            return len(batch.reqs)
        except Exception:  # noqa: BLE001
            return None


def _tag(probes: Any, worker: Any, batch: Any, out: Any) -> None:
    """The configuration that ran this cycle, read after the original returned (0.5.13+ switch
    inside it): the worker's steps / topk, the draft tokens the result was strided by, CUDA graph
    or eager from the result, the hold block."""
    try:
        dt = getattr(out, "speculative_num_draft_tokens", None)
        if not isinstance(dt, int):
            dt = getattr(worker, "speculative_num_draft_tokens", None)
        graph = getattr(out, "can_run_cuda_graph", None)
        probes.tag_cycle(getattr(worker, "speculative_num_steps", None), getattr(worker, "topk", None), dt,
                         _batch_size(batch), graph if isinstance(graph, bool) else None,
                         stepctl.current_block())
    except Exception:  # noqa: BLE001 - tagging never breaks a decode step
        pass


def _phase_hook(name: str) -> Callable[..., Any]:
    def phase(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not procstate._S.depth:  # prefill / DP-coordination calls are not decode phases
            return original(*args, **kwargs)
        probes = _probes()
        probes.phase_begin(name)
        try:
            return original(*args, **kwargs)
        finally:
            probes.phase_end(name)

    return phase


def _verify_v1_hook(field: str) -> Callable[..., Any]:
    """V1 verify: timed, and the accepted drafts per request read from ``field`` of the returned
    verify output (the release's name for it, from v1.yaml ``accept.fields``)."""
    timed = _phase_hook("verify")

    def verify_v1(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        out = timed(original, *args, **kwargs)
        if procstate._S.depth and isinstance(out, tuple):  # (logits, verify_output, ...) 0.5.11 / 0.5.12
            for item in out:
                counts = getattr(item, field, None)
                if counts is not None:
                    _probes().record_accept(list(counts), bonus_included=False)
                    break
        return out

    return verify_v1


def _accept_param_hook() -> Callable[..., Any]:
    """``read: param``: the method's first argument is the per-request correct-draft list."""

    def accept(original: Callable[..., Any], self: Any, num_correct_drafts_per_req: Any, *args: Any, **kwargs: Any) -> Any:
        if num_correct_drafts_per_req:
            _probes().record_accept(list(num_correct_drafts_per_req), bonus_included=False)
        return original(self, num_correct_drafts_per_req, *args, **kwargs)

    return accept


def _accept_result_hook(fields: tuple[str, ...]) -> Callable[..., Any]:
    """``read: result``: after the original, the first of ``fields`` present on its first argument."""

    def accept(original: Callable[..., Any], self: Any, result: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, result, *args, **kwargs)
        counts = next((getattr(result, f) for f in fields if getattr(result, f, None) is not None), None)
        if counts:
            _probes().record_accept(list(counts), bonus_included=False)
        return out

    return accept


def _aux_hook(style: str) -> Callable[..., Any]:
    """Around the funnel: while it runs, every module of the target model whose class defines
    ``set_eagle3_layers_to_capture`` gets an instance-level wrapper that asks
    ``layers.override_layer_ids`` first (nested delegation, e.g. KimiK25 -> DeepseekV3, is safe:
    the override is idempotent)."""

    def aux(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original).bind_partial(*args, **kwargs).arguments
        if style == "function":
            model, use = bound.get("model"), bound.get("eagle_use_aux_hidden_state")
        else:
            runner = bound.get("self", args[0] if args else None)
            model, use = getattr(runner, "model", None), getattr(runner, "eagle_use_aux_hidden_state", False)
        if not use or model is None:
            return original(*args, **kwargs)
        undo = _wrap_layer_setters(model)
        try:
            return original(*args, **kwargs)
        finally:
            undo()

    return aux


def _wrap_layer_setters(model: Any) -> Callable[[], None]:
    from .. import layers

    name = "set_eagle3_layers_to_capture"
    mods = [model, *(model.modules() if hasattr(model, "modules") else ())]
    done: list[Any] = []
    seen: set[int] = set()
    for m in mods:
        if id(m) in seen or not callable(getattr(type(m), name, None)):
            continue
        seen.add(id(m))
        bound = getattr(m, name)

        def wrapper(layer_ids: Any = None, *a: Any, _m: Any = m, _bound: Any = bound, **kw: Any) -> Any:
            return _bound(layers.override_layer_ids(_m, layer_ids), *a, **kw)

        object.__setattr__(m, name, wrapper)
        done.append(m)

    def undo() -> None:
        for m in done:
            m.__dict__.pop(name, None)

    return undo


def _allreduce_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    out = original(*args, **kwargs)
    try:
        _report_allreduce_path()
    except Exception as exc:  # noqa: BLE001 - reporting must never break TP init
        logger.warning("could not inspect the TP all-reduce path: %s", exc)
    return out


# GroupCoordinator attributes (0.5.11-0.5.23) of the non-NCCL all-reduce implementations.
_AR_PATHS = (("ca_comm", "SGLang custom all-reduce"), ("pcie_ipc_comm", "FlashInfer PCIe-IPC all-reduce"),
             ("qr_comm", "quick all-reduce (ROCm)"), ("torch_symm_mem_comm", "torch symm-mem all-reduce"),
             ("pymscclpp_comm", "MSCCL++ all-reduce"))


def allreduce_paths(group: Any) -> list[str]:
    """Non-NCCL all-reduce implementations live on this TP group (they take the small ones)."""
    found = []
    for attr, label in _AR_PATHS:
        comm = getattr(group, attr, None)
        if comm is not None and not getattr(comm, "disabled", False):
            found.append(label)
    return found


def _report_allreduce_path() -> None:
    if procstate._S.allreduce is not None:
        return
    from sglang.srt.distributed import parallel_state

    group = parallel_state.get_tp_group()
    size = int(getattr(group, "world_size", 1))
    paths = allreduce_paths(group)
    if size <= 1:
        procstate._S.allreduce = "none (TP 1)"
        logger.info("TP size 1: no tensor-parallel all-reduce, the NCCL preset does not touch decode")
    elif paths:
        procstate._S.allreduce = ", ".join(paths)
        logger.warning(
            "TP %d all-reduce path: %s active; the small decode all-reduces go there, not through "
            "NCCL, so the NCCL preset barely changes decode speed (it still shapes large/prefill "
            "collectives and fallbacks). A/B: relaunch with --disable-custom-all-reduce and compare tok/s",
            size, procstate._S.allreduce)
    else:
        procstate._S.allreduce = "NCCL"
        logger.info("TP %d all-reduce path: NCCL for every size; the NCCL preset is on the decode hot path", size)
