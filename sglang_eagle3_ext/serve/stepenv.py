"""Step-control variables exported in the user's shell (issue 34 case 3).

The plugin reads ``SGLANG_EAGLE3_HOLD`` / ``_HOLD_STEPS`` / ``_POLICY`` in EVERY SGLang process
(runtime/stepctl.py), so one left exported after a scan's dry run or a hand test makes every later
server of that shell rotate step counts on the hold schedule or run an old scan's policy table in
place of SGLang's own rule, with no word. Our commands set these variables themselves, for the one
server that needs them (``scan``: the hold schedule; ``launch --policy``: the policy), through the
server's own environment (``cfg.env``). So ``launch``, ``scan``, ``sweep`` and ``demo`` refuse to
start (exit 2, before anything runs) while one is exported, saying what it would do and how to
unset it; ``Server.start`` refuses the same for any other caller. Refusing rather than dropping it
silently: the user exported it for a reason, and a server that ignores the shell is as surprising
as one that obeys it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..runtime.errors import UserError
from ..runtime.settings import HOLD, HOLD_STEPS, POLICY

WHAT = {HOLD.name: "hold every candidate step count in turn for blocks of {v} decode cycles (the scan's "
                   "schedule) instead of SGLang's own rule",
        HOLD_STEPS.name: "rotate the hold schedule over steps {v}",
        POLICY.name: "choose step counts by the throughput policy of {v} in place of SGLang's own rule"}


def exported(environ: Mapping[str, str] | None = None, own: Mapping[str, str] | None = None) -> list[str]:
    """The step-control variables set (non-empty) in ``environ`` and not given by ``own`` (the
    server's own env additions, which win over the shell's)."""
    env = os.environ if environ is None else environ
    own = own or {}
    return [name for name in WHAT if (env.get(name) or "").strip() and name not in own]


def refuse_exported(command: str, environ: Mapping[str, str] | None = None,
                    own: Mapping[str, str] | None = None) -> None:
    """UserError(2) when a step-control variable is exported: what it would do to the server, and
    the fix."""
    env = os.environ if environ is None else environ
    names = exported(env, own)
    if not names:
        return
    name = names[0]
    more = f" (and {', '.join(names[1:])})" if names[1:] else ""
    fix = {POLICY.name: "launch --policy FILE sets it for its own server",
           HOLD.name: "scan sets it for its own server"}.get(name, "scan sets it for its own server")
    raise UserError(f"{command}: {name} set in this shell's environment{more} (exported {name}={env[name]!r}): "
                    f"every SGLang process started from here would {WHAT[name].format(v=env[name])}; "
                    f"`unset {' '.join(names)}` first ({fix})", exit_code=2)
