"""benchmarks/allreduce_small.py runs end to end (gloo on CPU: the plumbing; NCCL needs >= 2 GPUs)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, requires_sglang


@requires_sglang  # needs torch (the CPU test env has it)
def test_allreduce_small_cpu_plumbing():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "allreduce_small.py"), "--cpu", "2",
                        "--iters", "5", "--warmup", "1", "--hidden", "256", "--batch", "1",
                        "--draft-tokens", "1,3", "--presets", "none,tuned"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert "gloo on CPU x2" in lines[0] and lines[1].split()[-2:] == ["none", "tuned"]
    assert [ln.split()[:2] for ln in lines[2:]] == [["1", "1024"], ["3", "3072"]]  # fp32 rows x 256


def test_allreduce_small_refuses_one_gpu_or_none():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "allreduce_small.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and ">= 2 GPUs" in r.stderr
