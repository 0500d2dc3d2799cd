"""Our variables exported in the user's shell: what reaches the SGLang servers our commands start.

The plugin and the probes read these in EVERY SGLang process, so one left exported drives every
later server of that shell with no word. Our commands set each of them themselves, for the one
server that needs it, through the server's own environment (the env additions of
``flags.build_command``). Per variable:

* step control (``SGLANG_EAGLE3_HOLD`` / ``_HOLD_STEPS`` / ``_POLICY`` / ``_TREES``) and the aux-layer override
  (``SGLANG_EAGLE3_AUX_LAYERS``): ``launch``, ``scan``, ``sweep`` and ``demo`` refuse to start
  (exit 2, before anything runs) while one is exported and the launch does not set it, saying
  what it would do and how to unset it; ``Server.start`` refuses the same for any other caller.
  Refused, not dropped: they change what the server computes (its step counts, the draft's
  inputs), the user exported them for a reason, and the launch has its own flag for each.
* ``SGLANG_EAGLE3_NCCL``, ``EAGLE3_PROFILE``, ``_SPEC``, ``_ROUTE``: the launch's own (``--nccl``,
  ``--profile``, the spec, the route): an exported value is never passed on (a sweep's
  ``nccl: [none, tuned]`` must measure none against tuned, a plain server must not record probes
  labelled with an old spec); the launch says so.
* the other probe settings (``EAGLE3_PROFILE_EVERY`` / ``_MODE`` / ``_OUT`` / ``_TOGGLE`` /
  ``_METRICS`` / ...): passed on only to a server started with ``--profile`` (where the docs ask
  for them to be exported, e.g. the toggle signal) and not set by a flag; the dry run names them.
  Without ``--profile`` they are dropped, so stray probes never append to one file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..runtime.errors import UserError
from ..runtime.settings import (
    ALL,
    AUX_LAYERS,
    HOLD,
    HOLD_STEPS,
    NCCL,
    POLICY,
    PROFILE,
    PROFILE_ROUTE,
    PROFILE_SPEC,
    TREES,
)

WHAT = {HOLD.name: "hold every candidate step count in turn for blocks of {v} decode cycles (the scan's "
                   "schedule) instead of SGLang's own rule",
        HOLD_STEPS.name: "rotate the hold schedule over steps {v}",
        POLICY.name: "choose step counts by the throughput policy of {v} in place of SGLang's own rule",
        TREES.name: "build and hold the trees {v} beside the adaptive chains"}
REFUSED = {**WHAT, AUX_LAYERS.name: "feed the EAGLE-3 draft the hidden states of layers {v} instead of the "
                                    "ones its config names"}
_FIX = {POLICY.name: "launch --policy FILE sets it for its own server",
        HOLD.name: "scan sets it for its own server", HOLD_STEPS.name: "scan sets it for its own server",
        TREES.name: "launch --trees / scan --trees set it for their own server",
        AUX_LAYERS.name: "give --aux-layers, or aux_layers: in the preset, for the server that needs it"}
# set (or left out) by the launch from its own flags: an exported value never reaches a server
LAUNCH_OWN = (NCCL.name, PROFILE.name, PROFILE_SPEC.name, PROFILE_ROUTE.name)
# probe settings: passed on to a --profile server when no flag sets them, dropped otherwise
PROBE_KNOBS = tuple(s.name for s in ALL if s.name.startswith("EAGLE3_PROFILE") and s.name not in LAUNCH_OWN)


def _set(env: Mapping[str, str], name: str) -> bool:
    return bool((env.get(name) or "").strip())


def exported(environ: Mapping[str, str] | None = None, own: Mapping[str, str] | None = None) -> list[str]:
    """The refused variables (step control, aux layers) set (non-empty) in ``environ`` and not
    given by ``own`` (the server's own env additions, which win over the shell's)."""
    env = os.environ if environ is None else environ
    own = own or {}
    return [name for name in REFUSED if _set(env, name) and name not in own]


def refuse_exported(command: str, environ: Mapping[str, str] | None = None,
                    own: Mapping[str, str] | None = None) -> None:
    """UserError(2) when a refused variable is exported: what it would do to the server, and
    the fix."""
    env = os.environ if environ is None else environ
    names = exported(env, own)
    if not names:
        return
    name = names[0]
    more = f" (and {', '.join(names[1:])})" if names[1:] else ""
    raise UserError(f"{command}: {name} set in this shell's environment{more} (exported {name}={env[name]!r}): "
                    f"every SGLang process started from here would {REFUSED[name].format(v=env[name])}; "
                    f"`unset {' '.join(names)}` first ({_FIX[name]})", exit_code=2)


def inherited(environ: Mapping[str, str], add: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(dropped, kept): our exported variables a server with env additions ``add`` does not get,
    and the probe settings it inherits from the shell (name -> exported value)."""
    profiling = add.get(PROFILE.name) == "1"
    dropped: dict[str, str] = {}
    kept: dict[str, str] = {}
    for name in LAUNCH_OWN + PROBE_KNOBS:
        if name in add or name not in environ:
            continue
        if name in PROBE_KNOBS and profiling:
            if _set(environ, name):
                kept[name] = environ[name]
        else:
            dropped[name] = environ[name]
    return dropped, kept


def child_env(environ: Mapping[str, str], add: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a server: the shell's, less what ``inherited`` drops, plus ``add``."""
    dropped, _ = inherited(environ, add)
    env = {k: v for k, v in environ.items() if k not in dropped}
    env.update(add)
    return env


def inherited_notes(environ: Mapping[str, str], add: Mapping[str, str]) -> list[str]:
    """One note per dropped group and one for the kept probe settings (launch prints them)."""
    dropped, kept = inherited(environ, add)
    notes = []
    if NCCL.name in dropped and _set(dropped, NCCL.name):
        mine = add.get(NCCL.name) or "none"
        notes.append(f"{NCCL.name}={dropped[NCCL.name]!r} exported in this shell is not passed to the server: "
                     f"the launch sets the NCCL preset from --nccl (here {mine})")
    probes = [f"{k}={v}" for k, v in dropped.items() if k != NCCL.name and v.strip()]
    if probes:
        why = ("without --profile the probes stay off" if add.get(PROFILE.name) != "1"
               else "the launch sets them from its own flags")
        notes.append(f"{', '.join(probes)} exported in this shell: not passed to the server ({why})")
    if kept:
        notes.append(f"probe settings inherited from this shell (--profile, no flag sets them): "
                     f"{', '.join(f'{k}={v}' for k, v in kept.items())}")
    return notes


def command_notes(command: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """For commands that start servers of their own (sweep, scan, demo): which exported variables
    of ours their servers do not get (said once, before the first server)."""
    env = os.environ if environ is None else environ
    notes = []
    if _set(env, NCCL.name):
        notes.append(f"{command}: {NCCL.name}={env[NCCL.name]!r} exported in this shell is not passed to the "
                     "servers it starts: each takes its NCCL preset from its own nccl setting")
    probes = [f"{k}={env[k]}" for k in (PROFILE.name, PROFILE_SPEC.name, PROFILE_ROUTE.name) + PROBE_KNOBS
              if _set(env, k)]
    if probes:
        notes.append(f"{command}: {', '.join(probes)} exported in this shell: EAGLE3_PROFILE / _SPEC / _ROUTE are "
                     "set per server, the other probe settings reach only servers started with profiling on")
    return notes
