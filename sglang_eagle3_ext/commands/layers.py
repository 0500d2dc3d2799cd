"""`sgl-eagle3 layers check`: what an SGLang release will capture for a target/draft pair."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..runtime import layers
from ..runtime.errors import UserError
from ..runtime.safeparse import CONFIG_LIMIT, json_loads, read_text
from ..serve import layer_check
from .console import out, print_json

HELP = "Check which target hidden-state layers feed the EAGLE-3 draft (our convention: output of layer k)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="layers_cmd", metavar="ACTION")
    c = sub.add_parser("check", help="report the capture for prefill and decode, and every problem with a fix")
    c.add_argument("--target", required=True, metavar="PATH",
                   help="target model folder with config.json, or the config.json itself")
    c.add_argument("--draft", required=True, metavar="PATH",
                   help="EAGLE-3 draft model folder with config.json, or the config.json itself")
    c.add_argument("--sglang-version", metavar="V", default=None,
                   help="judge for this SGLang release (default: the installed / --sglang-root one)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--trained-on", metavar="LAYERS", default=None,
                   help="layers the draft was trained on, our convention: output of layer k, 'emb' (e.g. 2,30,58)")
    g.add_argument("--trained-on-hf", metavar="IDX", default=None,
                   help="the same as HF hidden_states indices (0 = embeddings; e.g. 3,31,59)")
    c.add_argument("--aux-layers", metavar="LAYERS", default=None,
                   help="judge the capture `launch --aux-layers LAYERS` sets (default: "
                        "$SGLANG_EAGLE3_AUX_LAYERS when set, else the release's own rule)")
    c.add_argument("--strict", action="store_true",
                   help="fail (exit 1) when the draft's ids mean different layers to different readers "
                        "(releases, vLLM, training conventions) and no --trained-on says which")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--sglang-root", metavar="PATH", default=argparse.SUPPRESS,
                   help="an unpacked SGLang tree to use instead of the installed one")
    f = sub.add_parser("families", help="target classes each supported SGLang release serves with "
                                        "EAGLE-3, and the rule each reads the draft's ids by")
    f.add_argument("--sglang-version", metavar="V", default=None,
                   help="only this release (default: every supported release)")
    f.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(layers_cmd=None)


def _pinned() -> dict:
    from ..serve import capture_rules

    return capture_rules.pinned()


def read_config(path: str, what: str) -> dict:
    """config.json of a model folder (or the file itself) -> dict; UserError(2) on bad input."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UserError(f"--{what} {path}: no such file (expected a model folder with config.json "
                        "or the config.json itself)", exit_code=2)
    try:
        data = json_loads(read_text(p, what="a model config", limit=CONFIG_LIMIT), strict=False)
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, too deep, not UTF-8
        raise UserError(f"--{what} {p}: not valid JSON ({exc})", exit_code=2) from None
    if not isinstance(data, dict):
        raise UserError(f"--{what} {p}: expected a JSON object", exit_code=2)
    return data


def _fmt(rep: layer_check.CheckReport, loops: list[int]) -> str:
    final_ok = layers.final_capturable(rep.fam or layers.FAMILIES[rep.family], rep.version)
    names = ",".join(layers.loop_label(i, rep.num_layers, final_ok) for i in loops)
    return f"{names}  (loop / HF indices {layers.format_layers(loops)})"


def render(rep: layer_check.CheckReport) -> None:
    fam = rep.family + (" -> deepseek_v2 rules via language_model" if rep.family == "kimi_k25" else "")
    fam = f"family {fam}" if rep.fam is not None else "no EAGLE-3 capture rule"
    out.print(f"SGLang {rep.version}; target {rep.target_arch}, {fam}, {rep.num_layers} decoder layers",
              highlight=False, markup=False)
    out.print(f"draft  {rep.draft_arch or '(no architectures)'}: "
              f"eagle_config.eagle_aux_hidden_state_layer_ids = {rep.nested_ids}"
              + (f", top-level = {rep.top_level_ids}" if rep.top_level_ids is not None else ""),
              highlight=False, markup=False)
    if rep.fam is None:  # no family: the first problem says why
        _problems(rep)
        return
    out.print(f"rule   {rep.rule}" + (f"  [{rep.source}]" if rep.source else ""),
              highlight=False, markup=False)
    out.print("captures (output of decoder layer k, emb = embedding output):", highlight=False)
    if rep.prefill_loop == rep.decode_loop:
        out.print(f"  prefill + decode: {_fmt(rep, rep.prefill_loop)}", highlight=False)
    else:
        out.print(f"  prefill (eager):          {_fmt(rep, rep.prefill_loop)}", highlight=False)
        out.print(f"  decode (CUDA graphs):     {_fmt(rep, rep.decode_loop)}", highlight=False)
    out.print(f"draft expects {rep.draft_count} aux hidden states ({rep.draft_count_from})", highlight=False)
    if rep.trained_on is not None:
        out.print(f"trained on: {layers.format_layers(rep.trained_on)}", highlight=False)
    for note in rep.notes:
        out.print(f"note: {note}", highlight=False, markup=False)
    if rep.ambiguity and rep.ok:
        out.print(f"warning: {rep.ambiguity}", highlight=False, markup=False)
    _problems(rep)


def _problems(rep: layer_check.CheckReport) -> None:
    if rep.ok:
        out.print("[green]OK[/]: consistent", highlight=False)
        return
    if rep.ambiguity and not any(p.what == rep.ambiguity for p in rep.problems):
        out.print(f"warning: {rep.ambiguity}", highlight=False, markup=False)
    out.print(f"[red]FAIL[/]: {len(rep.problems)} problem(s)", highlight=False)
    for i, p in enumerate(rep.problems, 1):
        out.print(f"  {i}. {p.what}", highlight=False, markup=False)
        out.print(f"     fix: {p.fix}", highlight=False, markup=False)


def run_families(args: argparse.Namespace) -> int:
    from ..serve import capture_rules

    tables = capture_rules.pinned()
    if args.sglang_version is not None:
        tables = {args.sglang_version: capture_rules.table_for(args.sglang_version)[0]}
    data = {v: {"targets": {a: {"rule": c.rule, "where": c.where, "via": c.via, "why": c.why}
                            for a, c in sorted(t.targets.items())},
                "drafts": {a: {"file": d.where, "eagle3_1_fields": list(d.reads)}
                           for a, d in sorted(t.drafts.items())}}
            for v, t in tables.items()}
    if args.json:
        print_json(data)
        return 0
    for v, d in data.items():
        out.print(f"SGLang {v}: {len(d['targets'])} target classes with EAGLE-3 capture", highlight=False,
                  markup=False)
        for a, c in d["targets"].items():
            extra = f" via {c['via']}" if c["via"] else ""
            out.print(f"  {a:44} {c['rule']:9} {c['where']}{extra}{'  ' + c['why'] if c['why'] else ''}",
                      highlight=False, markup=False)
        for a, dr in d["drafts"].items():
            out.print(f"  draft {a} ({dr['file']}); EAGLE-3.1 fields read: "
                      f"{', '.join(dr['eagle3_1_fields']) or 'none'}", highlight=False, markup=False)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.layers_cmd == "families":
        return run_families(args)
    if args.layers_cmd != "check":
        raise UserError("usage: sgl-eagle3 layers check --target PATH --draft PATH [...]", exit_code=2)
    target = read_config(args.target, "target")
    draft = read_config(args.draft, "draft")
    if args.trained_on is not None:
        trained = layers.parse_layers(args.trained_on)
    elif args.trained_on_hf is not None:
        trained = layers.parse_hf_layers(args.trained_on_hf)
    else:
        trained = None
    version = args.sglang_version
    package_dir = None  # the release's own tree, read only for a release not in the pinned tables
    if version is None:
        from ..runtime.sglang_env import locate

        env = locate(getattr(args, "sglang_root", None))
        version = env.version
        if getattr(args, "sglang_root", None) or version not in _pinned():
            package_dir = str(env.package_dir)
    else:
        from ..runtime.sglang_env import parse_version

        try:
            parse_version(version)
        except UserError as exc:
            raise UserError(f"--sglang-version: {exc}", exit_code=2) from None
    from ..runtime import settings

    aux_text = args.aux_layers if args.aux_layers is not None else settings.AUX_LAYERS.get()
    aux = layers.parse_layers(aux_text) if aux_text else None
    exported = None  # an exported override is not --aux-layers: say where it came from
    if aux is not None and args.aux_layers is None:
        exported = (f"{settings.AUX_LAYERS.name}={aux_text} exported in this shell (plain SGLang with our plugin "
                    "applies it; sgl-eagle3 launch refuses while it is exported)")
    rep = layer_check.check(target, draft, version, trained, aux, aux_from=exported,
                            package_dir=package_dir, strict=args.strict)
    if args.json:
        print_json(rep.to_dict())
    else:
        render(rep)
    return 0 if rep.ok else 1
