"""Did SGLang apply the hooks we asked for: HookRegistry only logs a target it cannot resolve, so we check each one right after its own apply_hooks (and at the first decode cycle)."""

from __future__ import annotations

from typing import Any

from . import procstate
from .procstate import logger

# ------------------------------------------------------------------------------------------------
# Verification: HookRegistry.apply_hooks() runs after register() returns (load_plugins), and a
# target it cannot resolve is only logged. We wrap apply_hooks once so the check runs right after
# SGLang's own apply; the first decode cycle re-checks in case apply_hooks was never called.

def _schedule_verify(registry: Any) -> None:
    original = registry.__dict__.get("apply_hooks")
    if not isinstance(original, classmethod) or getattr(original.__func__, "_eagle3_check", False):
        return

    def apply_then_check(cls: Any) -> None:
        try:
            original.__func__(cls)
        finally:
            if getattr(cls.__dict__.get("apply_hooks"), "__func__", None) is apply_then_check:
                cls.apply_hooks = original  # one shot: later calls are SGLang's own again
            _verify(registry)

    apply_then_check._eagle3_check = True  # type: ignore[attr-defined]
    registry.apply_hooks = classmethod(apply_then_check)


def _is_applied(registry: Any, target: str) -> bool:
    patched = getattr(registry, "_patched", None)
    if isinstance(patched, set):
        return target in patched
    import pkgutil

    try:  # a release without _patched: a wrapped attribute carries __wrapped__
        obj, attr = target.rsplit(".", 1)
        return hasattr(getattr(pkgutil.resolve_name(obj), attr), "__wrapped__")
    except Exception:  # noqa: BLE001
        return False


def _verify(registry: Any) -> list[str]:
    missing = [h.target for h in procstate._S.registered if not _is_applied(registry, h.target)]
    procstate._S.missing = missing
    if not missing:
        logger.info("all %d requested hook(s) applied", len(procstate._S.registered))
        return missing
    for h in procstate._S.registered:
        if h.target in missing and h.family == "stepctl":
            logger.error("HOOK NOT APPLIED: %s (%s): SGLang could not resolve or patch it; step counts are "
                         "not held in this process (with the init_states hook present it refuses to start)",
                         h.target, h.role)
        elif h.target in missing:
            logger.error("HOOK NOT APPLIED: %s (%s %s): SGLang could not resolve or patch it; the %s "
                         "numbers from this process are absent or wrong", h.target, h.family, h.role, h.role)
    logger.error("%d of %d requested hook(s) missing; for probes use `sgl-eagle3 patch apply` "
                 "(the source patch) on this SGLang instead", len(missing), len(procstate._S.registered))
    return missing


def _stepctl_missing() -> list[str]:
    """Step-control and tree targets this process asked for that SGLang did not apply (checked from the
    init_states hook, i.e. on every rank before it serves)."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry
    except Exception:  # noqa: BLE001
        return [h.target for h in procstate._S.registered if h.family in ("stepctl", "trees")]
    return [h.target for h in procstate._S.registered
            if h.family in ("stepctl", "trees") and not _is_applied(HookRegistry, h.target)]


def verify() -> list[str]:
    """Re-check now (tests, doctor in a live process): targets requested but not applied."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return _verify(HookRegistry)
