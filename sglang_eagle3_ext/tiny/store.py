"""Writing weights as safetensors shards that SGLang and transformers load, tensor by tensor.

Tensors may live on the GPU: each one is copied to the host (bf16 for floating point, except names
kept in float32) as it arrives, and a shard is written once it reaches ``max_bytes``, so host memory
holds at most one shard. One shard is written as ``model.safetensors`` (no index); more as
``model-0000i-of-0000N.safetensors`` plus ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHARD_BYTES = 5 * 10**9


class ShardWriter:
    def __init__(self, folder: Path, max_bytes: int = SHARD_BYTES, keep_fp32: tuple[str, ...] = ()):
        self.folder = folder
        self.max_bytes = max_bytes
        self.keep_fp32 = keep_fp32
        self.pending: dict[str, Any] = {}
        self.pending_bytes = 0
        self.files: list[tuple[Path, list[str]]] = []
        self.total = 0
        folder.mkdir(parents=True, exist_ok=True)
        # a rebuild into the same folder must not leave shards of an earlier (bigger) build behind
        for old in (*folder.glob("model*.safetensors"), *folder.glob("shard-*.tmp"),
                    *folder.glob("model.safetensors.index.json")):
            old.unlink()

    def add(self, name: str, tensor: Any) -> None:
        import torch

        if tensor.is_floating_point():
            want = torch.float32 if name.endswith(self.keep_fp32) and self.keep_fp32 else torch.bfloat16
            tensor = tensor.to(want)
        t = tensor.detach().to("cpu").contiguous()
        nbytes = t.numel() * t.element_size()
        if self.pending and self.pending_bytes + nbytes > self.max_bytes:
            self._flush()
        self.pending[name] = t
        self.pending_bytes += nbytes
        self.total += nbytes

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.folder / f"shard-{len(self.files):05d}.tmp"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.files.append((path, list(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> int:
        """Write the last shard, name the files, write the index; return total bytes."""
        if self.pending or not self.files:
            self._flush()
        n = len(self.files)
        if n == 1:
            self.files[0][0].replace(self.folder / "model.safetensors")
            return self.total
        weight_map: dict[str, str] = {}
        for i, (path, names) in enumerate(self.files, 1):
            final = f"model-{i:05d}-of-{n:05d}.safetensors"
            path.replace(self.folder / final)
            weight_map.update({k: final for k in names})
        index = {"metadata": {"total_size": self.total}, "weight_map": dict(sorted(weight_map.items()))}
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        return self.total


def load_all(folder: Path) -> dict[str, Any]:
    """Every tensor of a folder written by ShardWriter (tests, small models)."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
