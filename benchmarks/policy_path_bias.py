"""How well does the policy's model (expected tokens at s steps from per-position rates measured
at another step count) predict what a chain of s steps really accepts? On one fixed path and
over many paths (issue 25: on the H200 MoE, the policy ran 7 steps at 8 streams where 3 was 3.5 %
faster; its rates, measured from 7-step cycles, gave 3 steps 3.05 tokens; the 3-step server got
3.20 on the same bench request).

The maps are the tiny construction's own (`tiny --shape moe --acceptance 0.8`, seed 0: the
target's next token depends on the last token only, the draft agrees on a fixed set of ids), so
greedy decoding is exact and pure Python (tiny/construct.py). Per case: the per-position rates
the 7-step chain measures (pooled over the requests, as the policy pools them), the tokens per
verify they predict at s, and the s-step chain's own tokens per verify on the same requests.

- one path: every request is the bench's chat request (every chat prompt ends with the same
  template token, so every request walks the same 256-token stretch);
- many paths: requests start at N random points of the 1024-id cycle (distinct prompts).

Run: python benchmarks/policy_path_bias.py [--requests 200] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime.policy import expected_tokens  # noqa: E402
from sglang_eagle3_ext.tiny import construct  # noqa: E402

CHAT_LAST = 198  # tiny.json chat_last_token of every tiny build (the template's last id)


def pooled(f: list[int], g: list[int], steps: int, lasts: list[int], max_tokens: int) -> tuple[float, list[float]]:
    """Tokens per verify and per-position rates over the requests (sums, not means of means)."""
    reached, accepted = [0] * steps, [0] * steps
    tokens = verifies = 0
    for last in lasts:
        acc, rates, hist = construct.simulate_request(f, g, steps, last, max_tokens)
        v = sum(hist)
        verifies += v
        tokens += max_tokens
        # rates back to counts: reached[k] = verifies that got to depth k
        r = v
        for k in range(steps):
            reached[k] += r
            accepted[k] += round(r * rates[k])
            r = round(r * rates[k])
    return tokens / verifies, [a / r if r else 0.0 for a, r in zip(accepted, reached, strict=True)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=200, help="distinct paths in the many-path case")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--measured-at", type=int, default=7, help="the step count the rates come from")
    a = ap.parse_args(argv)
    f, g, _ = construct.partial_maps(0.8, 0, 32000)  # the moe shape's draft vocab: a 1024-id cycle
    n = construct.cycle_len(32000)
    rng = random.Random(25)
    cases = {"one path (chat)": [CHAT_LAST] * 8,
             f"{a.requests} paths": [rng.randrange(n) for _ in range(a.requests)]}
    for name, lasts in cases.items():
        _, rates = pooled(f, g, a.measured_at, lasts, a.max_tokens)
        print(f"{name}: rates at {a.measured_at} steps {[round(r, 3) for r in rates]}")
        for s in range(3, a.measured_at):
            real, _ = pooled(f, g, s, lasts, a.max_tokens)
            model = expected_tokens(rates, s)
            print(f"  {s} steps: model {model:.3f} vs the {s}-step chain {real:.3f} ({100 * (model / real - 1):+.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
