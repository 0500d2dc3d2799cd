"""What the open loop's ITL summary costs at scale: peak memory growth and time.

An open-loop rate keeps each stream's chunk log (arrival time and cumulative token count per text
chunk: two arrays, 16 bytes a chunk). The ITL figures cover one value per chunk of every request:
``serving_stats.summarize_rate`` finds them with ``quantiles.stats``, which recomputes the values
from the logs on each pass and keeps nothing per chunk. For comparison, the list of (value,
tokens) tuples sorted by ``weighted_stats``: what the summary did before.

Each measurement runs in a child of its own (peak RSS: ru_maxrss), on synthetic streams of
REQUESTS x CHUNKS chunks (1-3 tokens each, gaps of ~5 ms). Printed: chunks, MiB the summary grew
the peak by, seconds. A figure to read, not a test (tests/test_serving_stats.py checks the bound).

Run: .venv/bin/python benchmarks/itl_summary_memory.py [--requests 1000] [--chunks 1000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import resource, sys, time
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/tests")
from test_serving_stats import _streams
from sglang_eagle3_ext.measure import serving_stats
reqs, recs = _streams(int(sys.argv[2]), int(sys.argv[3]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if sys.argv[4] == "streamed":
    n = serving_stats.summarize_rate(reqs, recs, 10.0, None)["itl_ms"]["n"]
else:
    pairs = [p for r in recs for p in serving_stats.iter_itls(r.times, r.cum)]
    n = serving_stats.weighted_stats(pairs)["n"]
took = time.perf_counter() - t0
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(sum(len(r.times) for r in recs), grew / 1024, took, n)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=1000)
    a = ap.parse_args()
    print(f"{a.requests} requests x {a.chunks} chunks")
    for how in ("streamed", "tuples"):
        r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(a.requests), str(a.chunks), how],
                           capture_output=True, text=True, check=True)
        chunks, mib, secs, _ = r.stdout.split()
        label = "quantiles.stats (now)" if how == "streamed" else "tuples + sort (before)"
        print(f"  {label:24s} chunks {int(chunks):>10,}  peak grew {float(mib):8.1f} MiB  {float(secs):6.1f} s")


if __name__ == "__main__":
    main()
