"""Which route records which probe, for whatever mix a tree holds (issue 34 case 13).

A source patch may hold only some of its entries (``patch apply --only accept-v2-hook``): then the
marker is in the worker file but no decode probe is, and standing the plugin down because "a
source patch is present" silenced both routes. ``source_coverage`` reads what the marked lines of a
tree record (decode probes open a cycle; accept entries record accept counts); ``probe_route``
decides, never both routes on one role. The plugin (``register``), ``doctor`` (``overview``) and
the probes in a patched process (``probes.set_spec_config``, where no plugin can help: the log line
at start) all ask it. Stdlib only; reads files, never imports SGLang.
"""

from __future__ import annotations

import os
from typing import Any

from .marker import MARKER  # carried by every source-patched SGLang file
from .sglang_env import COMMON_FILE, V1_FILE, V2_FILE, SGLangEnv

# Files a source patch may mark (the accept-v2-scheduler entry patches the scheduler's mixin), and
# what a marked line records: decode probes open a cycle, accept entries record accept counts.
SOURCE_FILES = (V1_FILE, V2_FILE, COMMON_FILE, "srt/managers/scheduler_output_processor_mixin.py")
_RECORDS = {"cycle": ".cycle_begin(", "accept": ".record_accept("}
PROBE_ROLES = frozenset({"cycle", "draft", "verify", "extend", "accept"})


def source_coverage(env: SGLangEnv) -> dict[str, Any]:
    """What the source patch of this tree records, read from its marked lines (no manifest: the
    plugin runs where the patcher's files may not be): ``{"files": [...], "roles": [...]}``."""
    files: list[str] = []
    roles: set[str] = set()
    for rel in SOURCE_FILES:
        p = env.path(rel)
        try:
            text = p.read_text(encoding="utf-8") if p.is_file() else ""
        except (OSError, UnicodeDecodeError):
            continue
        if MARKER not in text:
            continue
        files.append(str(p))
        for line in text.splitlines():
            if MARKER in line:
                roles.update(role for role, call in _RECORDS.items() if call in line)
    return {"files": files, "roles": sorted(roles)}


def probe_route(cov: dict[str, Any], plugin_ok: bool) -> dict[str, Any]:
    """Which route records what, for any mix a tree holds (issue 34 case 13: a patch of the accept
    entry alone silenced both routes). ``route``: "source-patch" / "plugin" / "plugin+source-patch"
    / "none"; ``plugin_roles``: the probe roles the plugin hooks (None: all, empty: none); ``why``:
    one line for the server log and ``doctor``; ``problem``: why profiling cannot record, or None.
    Never both routes on one role: a count recorded twice would double the accept length."""
    roles = set(cov["roles"])
    names = ", ".join(os.path.basename(f) for f in cov["files"])
    if not cov["files"]:
        if plugin_ok:
            return {"route": "plugin", "plugin_roles": None, "problem": None,
                    "why": "HookRegistry AROUND hooks on the eagle worker phases"}
        return {"route": "none", "plugin_roles": frozenset(), "why": "no source patch and no plugin here",
                "problem": None}
    if "cycle" in roles and "accept" in roles:
        return {"route": "source-patch", "plugin_roles": frozenset(), "problem": None,
                "why": f"source patch present ({names}): it records the probes; plugin phase hooks stay off "
                       "(one route only)"}
    if "cycle" in roles:
        if plugin_ok:
            return {"route": "plugin+source-patch", "plugin_roles": frozenset({"accept"}), "problem": None,
                    "why": f"the source patch ({names}) times the cycles but holds no accept entry: the plugin "
                           "records the accept counts only"}
        return {"route": "source-patch", "plugin_roles": frozenset(), "problem": None,
                "why": f"the source patch ({names}) times the cycles but holds no accept entry and there is no "
                       "plugin here: accept counts (accept length) are not recorded; `sgl-eagle3 patch apply` "
                       "without --only adds them"}
    held = "accept counts only" if "accept" in roles else "no probe call"
    if plugin_ok:
        return {"route": "plugin+source-patch", "plugin_roles": PROBE_ROLES - roles, "problem": None,
                "why": f"the source patch ({names}) holds {held} (no decode probes): the plugin times the "
                       "cycles and phases" + (", the source patch records the accept counts" if roles else "")}
    problem = (f"profiling cannot record: the source patch ({names}) holds {held}, no decode probes (cycle "
               "timing), and the plugin cannot hook here; `sgl-eagle3 patch apply` without --only adds the "
               "decode probes")
    return {"route": "none", "plugin_roles": frozenset(), "why": problem, "problem": problem}
