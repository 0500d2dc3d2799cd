"""CPU cost of the throughput policy per decode cycle (one ``choose`` + one ``observe``), the
Python work it adds to every cycle inside SGLang's scheduler (issue 25: is the decider what
costs the policy server time at 8 streams on the H200? docs/results.md round 6).

Run: python benchmarks/policy_cost.py [SCAN_JSON] [--cycles N]
Prints microseconds per cycle at batch sizes 1 / 8 / 64 and the share of a cycle of the
table's own cycle ms at that batch size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime import policy  # noqa: E402

DEFAULT = REPO / "docs" / "data" / "h200-2026-12-01-r4" / "scan-8b" / "scan" / "scan.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("scan", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--cycles", type=int, default=20000)
    a = ap.parse_args(argv)
    table = policy.load_table(a.scan)
    built = table.candidates
    for bs in (1, 8, 64):
        d = policy.PolicyDecider(table)
        cur = max(built)
        t0 = time.perf_counter()
        for _ in range(a.cycles):
            cur = d.choose(bs, cur, built)
            d.observe([max(cur - 1, 0)] * bs, bs, cur)  # all but the last draft right
        us = (time.perf_counter() - t0) / a.cycles * 1e6
        ms = table.cycle_ms(cur, bs)
        share = f", {100 * us / 1000 / ms:.2f} % of its {ms:.2f} ms cycle" if ms else ""
        print(f"batch {bs:>2}: {us:.1f} us per cycle (choose + observe){share}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
