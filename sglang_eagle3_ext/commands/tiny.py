"""`sgl-eagle3 tiny`: build a target + EAGLE-3 draft(s) offline (built-in tiny or a real shape)."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from typing import Any

from ..documents.outputs import check_folder
from ..runtime.errors import UserError
from .console import err, out, print_json

HELP = "Build a tiny (or real-shape) target + EAGLE-3 draft + tokenizer offline, with a chosen acceptance."

SHAPE_FLAGS = (("layers", "decoder layers"), ("hidden", "hidden size"),
               ("intermediate", "MLP width (DeepSeek: the dense layers)"),
               ("heads", "attention heads"), ("kv-heads", "KV heads (llama)"),
               ("head-dim", "head dim (llama)"), ("vocab", "embedding / lm_head rows (>= 2048)"),
               ("draft-vocab", "draft vocab (hot set = target ids [0, N))"),
               ("experts", "routed experts (moe)"), ("active-experts", "experts per token (moe)"),
               ("moe-intermediate", "expert MLP width (moe)"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write target/ and draft/ into")
    p.add_argument("--acceptance", default="oracle", metavar="oracle|random|P[,P...]",
                   help="oracle: draft always right (accept length = steps+1); random: ~1; "
                        "P in [0,1]: draft right with probability ~P per position; a comma list of P "
                        "builds one target and draft-P/ per value (default oracle)")
    p.add_argument("--shape", default="tiny", metavar="NAME",
                   help="tiny (default), llama3-8b (Llama-3.1-8B dims) or moe (DeepSeek-V3/Kimi "
                        "architecture, 16 layers, 32 experts)")
    g = p.add_argument_group("shape overrides")
    for flag, what in SHAPE_FLAGS:
        g.add_argument(f"--{flag}", type=str, default=None, metavar="N", help=what)
    g.add_argument("--set", action="append", metavar="FIELD=N", default=None,
                   help="any integer shape field, e.g. q_lora_rank=64 (repeatable; docs/reference/tiny.md)")
    p.add_argument("--trained-on", metavar="LAYERS", default=None,
                   help="wiring construction: the draft is right only when SGLang captures the "
                        "outputs of exactly these layers (our convention, e.g. 2,16,29); needs P")
    p.add_argument("--alternatives", metavar="A1[,A2...]", default=None,
                   help="tree construction: where rank 0 is wrong, rank 1 holds the target's token "
                        "with probability A1, where ranks 0-1 are wrong rank 2 with A2, ... (needs P)")
    p.add_argument("--regions", metavar="P1,P2[,...]", default=None,
                   help="tree construction with prompt regions: rank-0 probability per region "
                        "(easy, medium, hard, ...); a chat prompt ending with a region's marker word "
                        "walks that region (docs/reference/tiny.md, Trees)")
    p.add_argument("--paths", metavar="N", default=None,
                   help="chain build whose prompts walk N different paths: the chat template ends with "
                        "the user's last word and prompts-paths.jsonl holds N prompts ending in "
                        "different words, each starting the walk elsewhere (bench / scan --prompts "
                        "it; needs P; docs/reference/tiny.md)")
    p.add_argument("--tree", action="append", metavar="STEPS,TOPK,DRAFT_TOKENS", default=None,
                   help="also print the expected accept length of this tree configuration (repeatable)")
    p.add_argument("--prompts", metavar="FILE", default=None,
                   help="tree build: print each prompt's expected accept length (one chat request "
                        "of 256 tokens) at the configurations printed")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--force", action="store_true", help="build a real-size shape even without a GPU")
    p.add_argument("--device", default=None, metavar="cuda|cpu", help="build device (default cuda if any)")
    p.add_argument("--verify", action="store_true",
                   help="after building, check the target with the transformers forward on the build "
                        "device (greedy == f, wiring blocks exact); exit 1 if it fails")
    p.add_argument("--json", action="store_true", help="print tiny.json instead of a summary")


def shape_from_args(args: argparse.Namespace):
    """The Shape the flags ask for (UserError exit 2 on a bad value); no torch import."""
    from ..tiny import shapes

    fields = {flag.replace("-", "_"): getattr(args, flag.replace("-", "_"), None) for flag, _ in SHAPE_FLAGS}
    fields.update(shapes.parse_set(getattr(args, "set", None)))
    return shapes.get_shape(getattr(args, "shape", None) or "tiny", **fields)


def validate(args: argparse.Namespace):
    """Everything checkable before anything is written: (acceptances, shape, trained_on)."""
    from .. import tiny
    from ..runtime import layers
    from ..tiny import wiring

    accs = tiny.parse_acceptances(args.acceptance)
    shape = shape_from_args(args)
    trained = None
    if getattr(args, "trained_on", None):
        trained = layers.parse_layers(args.trained_on)
        if isinstance(accs[0], str):
            raise UserError("--trained-on needs --acceptance P (or a list of P)", exit_code=2)
        wiring.plan(shape, trained, args.seed)
    from ..tiny import trees

    alts = trees.parse_alternatives(getattr(args, "alternatives", None))
    regs = trees.parse_regions(getattr(args, "regions", None))
    if (alts or regs) and (len(accs) != 1 or isinstance(accs[0], str) or trained is not None):
        raise UserError("--alternatives / --regions need one --acceptance P (no list, no "
                        "--trained-on)", exit_code=2)
    from ..tiny import paths

    if paths.parse_paths(getattr(args, "paths", None)) and (alts or regs or isinstance(accs[0], str)):
        raise UserError("--paths needs --acceptance P and a chain build (a tree build's prompts walk "
                        "their regions: --regions)", exit_code=2)
    if getattr(args, "prompts", None):
        if not (alts or regs):  # it was ignored silently (issue 34 case 12)
            raise UserError("--prompts is read by tree builds only (--alternatives / --regions: each "
                            "prompt's expected accept length); a --paths build writes its own "
                            "prompts-paths.jsonl for bench / scan --prompts", exit_code=2)
        from ..measure.prompts import load_prompts

        args.loaded_prompts = load_prompts(args.prompts)  # before the build: a bad file is one line at once
    for item in getattr(args, "tree", None) or []:
        trees.check_config(*parse_tree(item))
    if args.device not in (None, "cpu", "cuda") and not str(args.device).startswith("cuda:"):
        raise UserError(f"--device must be cuda or cpu, got {args.device!r}", exit_code=2)
    tiny.check_device(shape, len(accs), args.device, args.force)
    return accs, shape, trained


def parse_tree(item: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(x) for x in item.split(","))
    except ValueError:
        raise UserError(f"--tree takes STEPS,TOPK,DRAFT_TOKENS, got {item!r}", exit_code=2) from None
    return a, b, c


def print_tree(info: dict, root, extra: list[str] | None) -> None:
    """The tree expectation lines (docs/reference/tiny.md, Trees)."""
    from ..tiny import trees

    t = info["tree"]
    fr = ", ".join(f"rank {r} {v:.3f}" for r, v in enumerate(t["rank_fraction"]) if v)
    out.print(f"tree draft: the target's token is at {fr}, never {t['never_fraction']:.3f}"
              + (f"; alternatives {t['alternatives']}" if t["alternatives"] else ""), highlight=False)
    exp = t["expected_accept_len"]
    chat = t.get("expected_accept_len_chat", {}).get("256", {})
    prompts = t.get("expected_accept_len_prompt", {})
    cfgs = [(3, 1, 4), (3, 2, 7), (3, 4, 7), (3, 4, 13), (3, 8, 13), (5, 1, 6), (5, 4, 9),
            (5, 4, 21), (5, 8, 21)]
    for item in extra or []:
        cfgs.append(parse_tree(item))
    maps = None
    for st, k, d in cfgs:
        key = trees.key(st, k, d)
        if key not in exp:
            if maps is None:
                m = json.loads((root / "maps.json").read_text())
                maps = trees.maps_from_dict(m["f"], m["tree"], len(m["tree"]["rank"]))
            sim = trees.simulate_tree(maps, st, k, d)
            val, dep = sim.accept_len, sim.per_depth
        else:
            val, dep = exp[key], t["per_depth"][key]
        line = (f"  steps {st} topk {k} draft tokens {d:>2}: expected accept length {val:.2f} "
                f"(per depth {', '.join(f'{r:.2f}' for r in dep)})")
        if key in chat:
            line += f"; one chat request of 256 tokens {chat[key]:.2f}"
        if prompts and key in next(iter(prompts.values())):
            line += "; per prompt region " + ", ".join(
                f"{r['name']} ({w}) {prompts[w][key]:.2f}" for r, w in zip(t["regions"], t["markers"],
                                                                          strict=False))
        out.print(line, highlight=False)
    if t.get("markers"):
        out.print("  regions: a chat prompt ending with "
                  + ", ".join(f"'{w}' walks {r['name']} (P {r['p']})" for r, w in
                              zip(t["regions"], t["markers"], strict=False))
                  + " (examples/prompts-trees.jsonl)", highlight=False)


def print_prompts(root, prompts: list[Any], extra: list[str] | None) -> None:
    from ..tiny import trees

    cfgs = [(3, 1, 4), (3, 4, 13), (5, 8, 21)] + [parse_tree(x) for x in extra or []]
    for i, row in enumerate(trees.expect_prompts(root, prompts, cfgs)):
        text = prompts[i] if isinstance(prompts[i], str) else prompts[i][-1]["content"]
        out.print(f"  prompt {i + 1} ({text[:40]!r}, last token {row['last_token']}): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in row["expected"].items()), highlight=False)


def run(args: argparse.Namespace) -> int:
    from .. import tiny

    accs, shape, trained = validate(args)  # before importing torch
    check_folder(args.out)  # /etc/passwd/x, no permission: one line before any model is built
    t0 = time.perf_counter()
    label = ",".join(x.strip() for x in str(args.acceptance).split(","))
    what = "tiny models" if shape.name == "tiny" and not shape.overrides else f"{shape.name} models"
    err.print(f"building {what} (acceptance={label if len(accs) > 1 else accs[0]}, seed={args.seed}) ...")
    models = tiny.build(args.out, args.acceptance, seed=args.seed, shape=shape, trained_on=trained,
                        force=args.force, device=args.device,
                        alternatives=getattr(args, "alternatives", None),
                        regions=getattr(args, "regions", None), paths=getattr(args, "paths", None))
    rc = 0
    if getattr(args, "verify", False):
        from ..tiny.verify import verify

        dev = args.device or ("cpu" if shape.name == "tiny" else None)
        v = verify(models.root, device=dev)
        models.info["verify"] = v
        (models.root / "tiny.json").write_text(json.dumps(models.info, indent=2) + "\n")
        rc = 0 if v["ok"] else 1
    if args.json:
        print_json(models.info)
        return rc
    info = models.info
    if shape.name == "tiny" and not shape.overrides:
        out.print(f"target: {models.target}  (LlamaForCausalLM, {info['layers']} layers, hidden "
                  f"{info['hidden']}, vocab {info['vocab']})")
    else:
        out.print(f"target: {models.target}  ({shape.describe()}, {info['target_bytes'] / 1e9:.2f} GB)",
                  highlight=False)
    multi = len(models.drafts) > 1
    for lab, folder in models.drafts.items():
        d = info["drafts"][lab] if multi else info
        out.print(f"draft:  {folder}  (LlamaForCausalLMEagle3, 1 layer, draft vocab "
                  f"{info['draft_vocab']}, aux layers {info['aux_layers'] if 'trained_on' not in info else info['trained_on']}"
                  + (f", config ids {info['aux_config_ids']}" if "aux_config_ids" in info else "") + ")",
                  highlight=False)
        exp = d["expected_accept_len"]
        ind = "  " if multi else ""
        out.print(ind + "expected accept length (incl. bonus), greedy, topk 1, over many prompts: "
                  + ", ".join(f"{s} steps {exp[s]:.2f}" for s in ("1", "2", "3", "4")), highlight=False)
        if "expected_accept_len_chat" in d:  # every chat prompt ends alike: one fixed walk
            for tokens, chat in d["expected_accept_len_chat"].items():
                out.print(ind + f"  one chat request of {tokens} tokens (any chat prompt): "
                          + ", ".join(f"{s} steps {chat[s]:.2f}" for s in ("1", "2", "3", "4")),
                          highlight=False)
            for tokens, rng in d["request_range"].items():
                lo, hi = rng["3"]
                out.print(ind + f"  one request of {tokens} tokens lands in {lo:.2f}..{hi:.2f} at 3 steps, "
                          "by its prompt's last token (docs/reference/tiny.md, measured vs expected)",
                          highlight=False)
        if "paths" in d:  # the prompt set walks many stretches: its pooled figure is the one to expect
            pe = d["paths"]["expected_accept_len"]["256"]
            out.print(ind + f"  {info['paths']['count']} different paths ({info['paths']['prompts']}), "
                      "one 256-token request per prompt, "
                      "pooled: " + ", ".join(f"{s} steps {pe[s]:.2f}" for s in ("1", "2", "3", "4")),
                      highlight=False)
        if "per_position" in d:
            out.print(("  " if multi else "") + "per-position acceptance at 4 steps: "
                      + ", ".join(f"{r:.2f}" for r in d["per_position"]["4"])
                      + f"  (needs SGLang {info['min_sglang']})", highlight=False)
    if "tree" in info:
        print_tree(info, models.root, getattr(args, "tree", None))
        if getattr(args, "prompts", None):
            print_prompts(models.root, args.loaded_prompts, getattr(args, "tree", None))
    if "wiring" in info:
        w = info["wiring"]
        ok = ",".join(map(str, w["trained_on"]))
        out.print(f"wiring: trained on outputs of layers {ok}; draft config ids {w['aux_config_ids']} -> "
                  f"SGLang {w['judged_for_sglang']} captures {','.join(map(str, w['default_capture']))} "
                  f"by default ({'right' if w['default_capture_right'] else 'WRONG: accept length ~1.0'}); "
                  f"right capture: {w['expected_accept_len_right']['3']:.2f} at 3 steps; fix: {w['fix']}",
                  highlight=False)
        out.print(f"check:  sgl-eagle3 layers check --target {shlex.quote(str(models.target))} --draft "
                  f"{shlex.quote(str(models.draft))} --trained-on {ok}", highlight=False, markup=False)
    out.print(f"launch: --model-path {shlex.quote(str(models.target))} --speculative-algorithm EAGLE3 "
              f"--speculative-draft-model-path {shlex.quote(str(models.draft))}", highlight=False, markup=False)
    if "verify" in info:
        v = info["verify"]
        out.print(f"verify: target greedy right on {v['target_ok']}/{v['contexts']} contexts"
                  + (f", wiring blocks exact at {v['wiring_exact_layers']}/{len(info['trained_on'])} layers"
                     if "wiring_exact_layers" in v else "")
                  + f" (transformers, bf16, {v['device']}): {'OK' if v['ok'] else 'FAIL'}", highlight=False)
    err.print(f"done in {time.perf_counter() - t0:.1f} s")
    return rc
