"""Stand-in for Hugging Face ``datasets`` so ``sglang.bench_serving`` imports where it is absent.

SGLang's bench_serving (0.5.9: ``sglang/bench_serving.py``; 0.5.16 and 0.5.23:
``sglang/benchmark/datasets/mmmu.py``) does ``from datasets import load_dataset`` at import time,
but only the MMMU / LongBench datasets ever call it. Put this folder first on PYTHONPATH only when
the real package is missing; the random / sharegpt datasets then run unchanged, and asking for a
dataset that needs the real package fails with one clear line.
"""

from __future__ import annotations

from typing import Any

STANDIN = True  # lets a caller tell this module from the real package


def load_dataset(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        "the 'datasets' package is not installed (a stand-in from sglang-eagle3-ext is on "
        "PYTHONPATH): use --dataset-name random or sharegpt, or pip install datasets"
    )
