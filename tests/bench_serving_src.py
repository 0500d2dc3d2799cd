"""SGLang bench_serving's own definitions, taken from the pinned release sources (not imported).

``python -m sglang.bench_serving`` cannot be imported here: its package pulls in HF ``datasets``
and half of SGLang's server. The functions our open-loop bench mirrors are plain Python over
numpy, so each is taken from the release file by name (ast) and executed in a namespace holding
what it references: the release's own code, run as it is. Used by tests/test_arrivals.py and
tests/test_serving_stats.py.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import math
import random
import time
import typing
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from sglang_eagle3_ext.serve import releases


def _defs(path: Path, names: tuple[str, ...]) -> str:
    tree = ast.parse(path.read_text())
    got = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    missing = [n for n in names if n not in got]
    if missing:
        raise LookupError(f"{path}: no {missing}")
    return "\n\n".join(ast.unparse(got[n]) for n in names)


def load(version: str) -> dict[str, Any]:
    """Namespace with get_request, calculate_metrics, RequestFuncOutput, DatasetRow,
    sample_sharegpt_requests and (0.5.23+) calculate_goodput from release ``version``."""
    root = releases.fetch(version) / "sglang" / "benchmark"
    ns: dict[str, Any] = {n: getattr(typing, n) for n in typing.__all__}
    ns.update(np=np, asyncio=asyncio, time=time, json=json, math=math, random=random, warnings=warnings,
              dataclass=dataclasses.dataclass, field=dataclasses.field, __name__="bench_serving_src",
              PreTrainedTokenizerBase=object, RequestFuncInput=object, TERM_PLOTLIB_AVAILABLE=False,
              ASSISTANT_SUFFIX="Assistant:", SHAREGPT_REPO_ID="", SHAREGPT_FILENAME="",
              is_file_valid_json=lambda p: True, download_and_cache_hf_file=None,
              remove_suffix=lambda s, x: s[: -len(x)] if x and s.endswith(x) else s)
    code = [_defs(root / "datasets" / "common.py", ("DatasetRow",)),
            _defs(root / "serving.py", ("RequestFuncOutput", "BenchmarkMetrics", "get_request",
                                        "calculate_metrics")),
            _defs(root / "datasets" / "sharegpt.py", ("sample_sharegpt_requests",))]
    if (root / "goodput.py").is_file():
        import msgspec

        ns["msgspec"] = msgspec
        code.append(_defs(root / "goodput.py", ("GoodputMetrics", "calculate_goodput")))
    exec(compile("\n\n".join(code), f"<bench_serving {version}>", "exec"), ns)  # noqa: S102
    return ns


def gaps_of(ns: dict[str, Any], n: int, rate: float, seed: int) -> list[float]:
    """The sleeps bench_serving's get_request makes between ``n`` requests after
    ``np.random.seed(seed)`` (its run_benchmark), captured instead of slept."""
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    async def run() -> None:
        async for _ in ns["get_request"]([object()] * n, rate):
            pass

    np.random.seed(seed)
    real = ns["asyncio"]
    ns["asyncio"] = type("A", (), {"sleep": staticmethod(fake_sleep)})
    try:
        asyncio.run(run())
    finally:
        ns["asyncio"] = real
    return slept
