"""scan and the scan's readers under hostile use (issue 34): a scan that measures nothing, signals,
exported step-control variables, step bounds, --out, the policy's main cells.

What is faked and why: no GPU, so the server is tests/standins/standin_scan.py (a real subprocess,
started by the real server.Server from the argv and env the scan builds; see tests/test_scan.py),
and a server that ignores SIGTERM is that stand-in with STANDIN_SCAN_IGNORE_TERM=1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, sigint_default
from test_scan import STANDINS, _argv, _free_port, models, on_path  # noqa: F401 (fixtures)

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.runtime import policy

ENV_PP = f"{STANDINS}:{REPO}"


# ------------------------------------------------------------------ case 4: main cells kept


def _c(steps, bs, level, cycles, ms, rates=(0.8, 0.6, 0.4)):
    al = policy.expected_tokens(list(rates), steps)
    return {"steps": steps, "bs": bs, "level": level, "cycles": cycles, "cycle_ms": ms, "accept_len": al,
            "per_position": list(rates[:steps]), "graph": True}


def test_34_4_a_levels_thin_main_cell_is_kept():
    """The 3-step cell at batch 8 (10 cycles, 4.8 ms) is that level's measurement: kept, so the
    policy picks 2 steps there (the scan's best), not 3 costed from batch 1's 3.4 ms."""
    cells = [_c(1, 1, 1, 40, 2.5), _c(2, 1, 1, 40, 2.95), _c(3, 1, 1, 20, 3.4),
             _c(1, 8, 8, 30, 3.2), _c(2, 8, 8, 30, 4.0), _c(3, 8, 8, 10, 4.8),
             _c(3, 5, 8, 3, 4.1)]  # a drain cell (bs 5 while level 8 finished): between 1 and 8
    doc = {"schema": policy.SCHEMA, "cells": cells}
    table = policy.table_from_doc(doc, graph_bs=None)
    assert table.cycle_ms(3, 8) == pytest.approx(4.8)           # measured, not extrapolated
    best, _ = policy.PolicyDecider(table).best(8, [1, 2, 3])
    assert best == 2
    assert all(c["steps"] != 3 or c["bs"] != 5 for c in scan_doc.main_cells(doc))
    assert (3, 5) not in {(s, b) for s, b, *_ in table.cells}   # the thin drain cell bracketed: dropped
    # a thin drain cell outside its step count's measured span is kept (its only cost there)
    t2 = policy.table_from_doc({"schema": policy.SCHEMA, "cells": [_c(2, 8, 8, 30, 4.0), _c(2, 3, 8, 4, 3.0),
                                                                   _c(1, 8, 8, 30, 3.2)]}, graph_bs=None)
    assert t2.cycle_ms(2, 3) == pytest.approx(3.0)
