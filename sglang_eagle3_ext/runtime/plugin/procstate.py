"""What one SGLang process holds for the plugin: its logger, its state (role, hooks, route) and the names it answers to."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .. import nccl, settings

if TYPE_CHECKING:  # annotations only: hookplan imports this module
    from .hookplan import Hook

ENV_PROFILE = settings.PROFILE.name
ENV_NCCL = nccl.ENV
ENV_AUX = settings.AUX_LAYERS.name
ENTRY_POINT = "sglang_eagle3_ext.runtime.plugin:register"
# installs made before the move name the alias (same module object, sglang_eagle3_ext/_aliases.py)
OLD_ENTRY_POINT = "sglang_eagle3_ext.plugin:register"
ENTRY_POINT_NAME = "eagle3_ext"  # pyproject.toml [project.entry-points."sglang.srt.plugins"]


# ------------------------------------------------------------------------------------------------
# Logging: our own stderr handler, because register() runs before SGLang configures logging in
# a spawned scheduler (INFO would be dropped) and stderr is what the server log captures.

class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (SGLang or pytest may swap it)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _make_logger() -> logging.Logger:
    log = logging.getLogger("sglang_eagle3_ext.plugin")
    if not log.handlers:
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("sglang-eagle3-ext plugin [pid %(process)d] %(levelname)s: %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


logger = _make_logger()


# ------------------------------------------------------------------------------------------------
# Runtime state of this process

@dataclass
class _State:
    role: str = ""
    registered: list[Hook] = field(default_factory=list)
    missing: list[str] | None = None  # None: not verified yet
    route: str = "none"
    nccl: dict[str, Any] | None = None
    allreduce: str | None = None
    depth: int = 0
    spec: tuple = ()
    stepctl_checked: bool = False
    notes: list[str] = field(default_factory=list)


_S = _State()


@lru_cache(maxsize=1)
def _probes() -> Any:
    from .. import probes

    return probes
