"""`tiny --verify`: check a built target with the transformers forward before any SGLang launch.

Loads ``target/`` in bf16 on the build device (an H200 holds the 8B and the MoE target) and checks
the construction on random contexts: oracle -> id 0; random -> never an id >= 2043; partial ->
greedy == f(last token) with a positive winning logit; wiring -> each trained layer's block is
exactly +-kappa in its output and exactly 0 in the outputs of L-1 and L+1 (bf16, as SGLang runs).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .tokenizer import SPECIALS, VOCAB


def verify(root: str | Path, contexts: int = 8, length: int = 16, device: str | None = None) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from .gen import pick_device

    root = Path(root)
    try:
        info = json.loads((root / "tiny.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"--verify: no readable tiny.json in {root} ({exc})", exit_code=2) from None
    dev = pick_device(device)
    model = AutoModelForCausalLM.from_pretrained(str(root / "target"), dtype=torch.bfloat16).to(dev).eval()
    rng = random.Random(1234)
    ctx = [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(contexts)]
    wiring = info.get("wiring")
    with torch.no_grad():
        out = model(torch.tensor(ctx, device=dev), output_hidden_states=wiring is not None)
    logits = out.logits[:, -1].float()
    got = logits.argmax(-1).tolist()
    acc = info["acceptance"][0] if isinstance(info["acceptance"], list) else info["acceptance"]
    res: dict[str, Any] = {"contexts": contexts, "device": dev}
    if acc == "oracle":
        res["target_ok"] = sum(g == 0 for g in got)
    elif acc == "random":
        res["target_ok"] = sum(g < VOCAB - len(SPECIALS) for g in got)
    else:
        f = json.loads((root / "maps.json").read_text())["f"]
        res["target_ok"] = sum(g == f[c[-1]] and float(m) > 0
                               for g, c, m in zip(got, ctx, logits.max(-1).values, strict=True))
    res["ok"] = res["target_ok"] == contexts
    if wiring is not None:
        hs = out.hidden_states
        exact = 0
        for L in wiring["trained_on"]:
            a, b = wiring["layout"]["blocks"][str(L)]
            kappa = float(wiring["layout"]["kappa"])
            written = set(hs[L + 1][..., a:b].abs().float().unique().tolist()) == {kappa}
            exact += written and not hs[L][..., a:b].any() and not hs[L + 2][..., a:b].any()
        res["wiring_exact_layers"] = exact
        res["ok"] = res["ok"] and exact == len(wiring["trained_on"])
    del model
    if dev.startswith("cuda"):
        torch.cuda.empty_cache()
    return res
