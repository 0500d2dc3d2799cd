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
- many paths: requests start at N random points of the 1024-id cycle (distinct prompts);
- the `tiny --paths 32` prompt set (docs/reference/tiny.md): one request per prompt.

With the round-7 H200 MoE scan's cycle ms at 8 streams (docs/data/h200-2026-12-02-r7/moe4), each
case also says which step count the model ranks first there and which one really is.

Run: python benchmarks/policy_path_bias.py [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime.policy import expected_tokens  # noqa: E402
from sglang_eagle3_ext.tiny import construct, tokenizer  # noqa: E402
from sglang_eagle3_ext.tiny import paths as tpaths  # noqa: E402

SCAN = REPO / "docs" / "data" / "h200-2026-12-02-r7" / "moe4" / "scan-moe" / "scan.json"

CHAT_LAST = 198  # tiny.json chat_last_token of every tiny build (the template's last id)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=200, help="distinct paths in the many-path case")
    ap.add_argument("--measured-at", type=int, default=7, help="the step count the rates come from")
    a = ap.parse_args(argv)
    f, g, _ = construct.partial_maps(0.8, 0, 32000)  # the moe shape's draft vocab: a 1024-id cycle
    n = construct.cycle_len(32000)
    rng = random.Random(25)
    with tempfile.TemporaryDirectory() as tmp:  # the paths build's tokenizer picks its words
        tokenizer.build_tokenizer(Path(tmp), template=tokenizer.TAIL_TEMPLATE)
        words = tpaths.path_words(Path(tmp), f, 32)
    cases = {"one path (chat)": [CHAT_LAST] * 8,
             f"{a.requests} paths": [rng.randrange(n) for _ in range(a.requests)],
             "tiny --paths 32 prompts": [i for _, i in words]}
    for name, lasts in cases.items():
        # pooled over one 256-token request per entry: all tokens / all verifies, summed counts
        pooled = tpaths.paths_info(f, g, lasts)
        rates = pooled["per_position"]["256"][str(a.measured_at)]
        print(f"{name}: rates at {a.measured_at} steps {[round(r, 3) for r in rates]}")
        model, real = {}, {}
        for s in range(3, a.measured_at + 1):
            real[s] = pooled["expected_accept_len"]["256"][str(s)]
            model[s] = expected_tokens(rates, s)
            if s < a.measured_at:
                print(f"  {s} steps: model {model[s]:.3f} vs the {s}-step chain {real[s]:.3f} "
                      f"({100 * (model[s] / real[s] - 1):+.1f} %)")
        for bs in (1, 8):
            ms = cycle_ms(bs)
            m = {s: model[s] / ms[s] for s in model if s in ms}
            r = {s: real[s] / ms[s] for s in real if s in ms}
            pick, best = max(m, key=m.get), max(r, key=r.get)
            print(f"  at {bs} stream(s), H200 MoE cycle ms: the model ranks {pick} steps first, the chains "
                  f"{best} ({'right' if pick == best else f'WRONG: {best} over {pick} by '}"
                  f"{'' if pick == best else f'{100 * (r[best] / r[pick] - 1):.1f} %'})")
    return 0


def cycle_ms(bs: int) -> dict[int, float]:
    """Steady cycle ms per step count at ``bs`` from the round-7 MoE scan (the best-sampled cell)."""
    cells = [c for c in json.loads(SCAN.read_text())["cells"] if c["bs"] == bs]
    out: dict[int, tuple[int, float]] = {}
    for c in cells:
        if c["cycles"] > out.get(c["steps"], (0, 0.0))[0]:
            out[c["steps"]] = (c["cycles"], c["cycle_ms"])
    return {s: v[1] for s, v in out.items()}


if __name__ == "__main__":
    raise SystemExit(main())
