"""Which of our documents (or a model's config) a JSON file is: the answer a reader gives when it
is handed a file of another kind ("this is a bench result"), instead of a parse error."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..runtime.safeparse import json_loads

# schema prefix -> (short kind, what it is and which command wrote it)
SCHEMAS = {
    "eagle3_bench/": ("bench", "a bench result (sgl-eagle3 bench)"),
    "eagle3_ladder/": ("bench", "a concurrency ladder (sgl-eagle3 bench --concurrency LIST)"),
    "eagle3_serving/": ("bench", "an open-loop bench result (sgl-eagle3 bench --request-rate)"),
    "eagle3_sweep/": ("sweep", "a sweep's results.json (sgl-eagle3 sweep)"),
    "eagle3_scan/": ("scan", "a scan's scan.json (sgl-eagle3 scan)"),
    "sgl_eagle3_tiny/": ("tiny", "a tiny build's tiny.json (sgl-eagle3 tiny)"),
    "sglang-eagle3-ext/patch-manifest/": ("manifest", "a patch manifest (sgl-eagle3 patch)"),
}


def identify(text: str) -> tuple[str, str] | None:
    """(kind, description) when ``text`` is one whole JSON document of a known kind, else None
    (a JSONL file of probe records is not one document and is never named here)."""
    try:
        data = json_loads(text)
    except ValueError:
        return None
    return of(data)


def of(data: Any) -> tuple[str, str] | None:
    if not isinstance(data, dict):
        return None
    schema = data.get("schema")
    if isinstance(schema, str):
        for prefix, kind in SCHEMAS.items():
            if schema.startswith(prefix):
                return kind
        return None
    if isinstance(data.get("architectures"), list):
        return ("model", "a model's config.json")
    if data and all(isinstance(v, dict) and "candidate_steps" in v for v in data.values()):
        return ("adaptive", "an adaptive speculation config (SGLang's tiers)")
    return None


def not_probes(path: str, kind: tuple[str, str]) -> str:
    """The line for a probe-file reader (profile, calibrate) handed a document of another kind."""
    short, what = kind
    folder = Path(path).parent
    tip = {"bench": f"; to set it beside the probes: profile prof.jsonl --bench {path}",
           "sweep": f"; its probe files are {folder}/configs/*/prof.jsonl, and `sgl-eagle3 sweep --report "
                    f"{folder}` reads them all",
           "scan": f"; its probe file is {folder / 'prof.jsonl'}"}.get(short, "")
    return (f"{path}: this is {what}; profile reads probe files (prof.jsonl, written by a server started "
            f"with --profile) or a server log with EAGLE3_PROF blocks{tip}")


PROBES = ("probes", "a probe file (the probes' JSONL, which `sgl-eagle3 profile` reads)")


def is_probe_record(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("eagle3_prof/")


def starts_with_probe_record(path: Path) -> bool:
    """Whether the first line of a regular file is one probe record (a JSONL probe file). Anything
    else (a FIFO, a device, a folder) is not opened for reading: no wait, no endless read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            return is_probe_record(json_loads(f.readline(1 << 20)))
        except (OSError, ValueError):
            return False


def not_bench(path: str, kind: tuple[str, str]) -> str:
    """The line for a bench-result reader (compare) handed a document of another kind."""
    tip = f"; profile it: sgl-eagle3 profile {path}" if kind[0] == "probes" else ""
    return (f"{path}: this is {kind[1]}; compare reads bench results (`sgl-eagle3 bench --out`), "
            f"ladders, a sweep's results.json or a scan's scan.json{tip}")
