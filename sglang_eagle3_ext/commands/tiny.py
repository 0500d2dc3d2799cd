"""`sgl-eagle3 tiny`: build the built-in tiny target + EAGLE-3 draft (no download)."""

from __future__ import annotations

import argparse
import time

from ..console import err, out, print_json
from ..resources import output_dir

HELP = "Build a tiny Llama target + EAGLE-3 draft + tokenizer offline, with a chosen acceptance."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write target/ and draft/ into")
    p.add_argument("--acceptance", default="oracle", metavar="oracle|random|P",
                   help="oracle: draft always right (accept length = steps+1); random: ~1; "
                        "P in [0,1]: draft right with probability ~P per position (default oracle)")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--json", action="store_true", help="print tiny.json instead of a summary")


def run(args: argparse.Namespace) -> int:
    from .. import tiny

    acc = tiny.parse_acceptance(args.acceptance)  # validate before importing torch
    output_dir(args.out)  # /etc/passwd/x, no permission: one line before any model is built
    t0 = time.perf_counter()
    err.print(f"building tiny models (acceptance={acc}, seed={args.seed}) ...")
    models = tiny.build(args.out, acc, seed=args.seed)
    if args.json:
        print_json(models.info)
        return 0
    info = models.info
    out.print(f"target: {models.target}  (LlamaForCausalLM, {info['layers']} layers, hidden "
              f"{info['hidden']}, vocab {info['vocab']})")
    out.print(f"draft:  {models.draft}  (LlamaForCausalLMEagle3, 1 layer, draft vocab "
              f"{info['draft_vocab']}, aux layers {info['aux_layers']})")
    exp = info["expected_accept_len"]
    out.print("expected accept length (incl. bonus), greedy, topk 1: "
              + ", ".join(f"{s} steps {exp[s]:.2f}" for s in ("1", "2", "3", "4")))
    if "per_position" in info:
        out.print("per-position acceptance at 4 steps: "
                  + ", ".join(f"{r:.2f}" for r in info["per_position"]["4"])
                  + f"  (needs SGLang {info['min_sglang']})")
    out.print(f"launch: --model-path {models.target} --speculative-algorithm EAGLE3 "
              f"--speculative-draft-model-path {models.draft}")
    err.print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0
