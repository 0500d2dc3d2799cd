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


def generate_client(version: str) -> Any:
    """bench_serving's own ``--backend sglang`` request function (``async_request_sglang_generate``
    and what it calls), from release ``version``, with its defaults for ``args`` (temperature 0,
    ignore_eos on, streaming). Returns ``one(url, prompt, output_len) -> RequestFuncOutput``."""
    import os
    import sys
    import traceback
    import types

    import aiohttp

    root = releases.fetch(version) / "sglang" / "benchmark"
    ns: dict[str, Any] = {n: getattr(typing, n) for n in typing.__all__}
    args = types.SimpleNamespace(temperature=0.0, disable_ignore_eos=False, top_p=1.0, disable_stream=False,
                                 return_logprob=False, return_routed_experts=False, logprob_start_len=-1,
                                 top_logprobs_num=0, token_ids_logprob=None, header=None, cache_report=False)
    ns.update(aiohttp=aiohttp, os=os, sys=sys, traceback=traceback, time=time, json=json, args=args,
              dataclass=dataclasses.dataclass, field=dataclasses.field, tqdm=object,
              _ROUTING_KEY_HEADER="X-SMG-Routing-Key", __name__="bench_serving_src",
              remove_prefix=lambda s, p: s[len(p):] if s.startswith(p) else s)
    try:
        import orjson

        ns["orjson"] = orjson
    except ImportError:
        pass
    src = root / "serving.py"
    names = ("RequestFuncInput", "RequestFuncOutput", "get_auth_headers", "get_request_headers",
             "_create_bench_client_session", "async_request_sglang_generate")
    later = ("_record_server_prompt_len",)  # 0.5.23+
    names += tuple(n for n in later if f"def {n}(" in src.read_text())
    exec(compile(_defs(src, names), f"<bench_serving {version} generate>", "exec"), ns)  # noqa: S102

    def one(url: str, prompt: str, output_len: int) -> Any:
        inp = ns["RequestFuncInput"](prompt=prompt, api_url=url + "/generate", prompt_len=0, output_len=output_len,
                                     model="", lora_name=None, image_data=None, extra_request_body={})
        return asyncio.run(ns["async_request_sglang_generate"](inp))

    return one
