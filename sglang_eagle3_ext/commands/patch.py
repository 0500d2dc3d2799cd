"""`sgl-eagle3 patch apply|status|diff|revert`: the libcst source patcher on an SGLang tree."""

from __future__ import annotations

import argparse

from ..patcher import engine
from ..runtime.errors import UserError
from ..runtime.sglang_env import locate
from .console import out, print_json

HELP = "Insert (or remove) profiling probes and the aux-layer override in SGLang's source."


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="patch_cmd", metavar="ACTION")
    a = sub.add_parser("apply", help="patch the eagle worker(s); a no-op when already applied")
    a.add_argument("--only", metavar="NAME,...", help="apply only these patches (see `patch status`)")
    a.add_argument("--dry-run", action="store_true", help="check every anchor and show the plan; write nothing")
    a.add_argument("--aux-layers", metavar="2,30,58",
                   help="also override the EAGLE-3 aux hidden-state layers (outputs of decoder "
                        "layers k, 0-based; 'off' removes the override; absent keeps the current one)")
    s = sub.add_parser("status", help="per-file truth: patched, original or drifted")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    d = sub.add_parser("diff", help="unified diff (pristine -> installed, or installed -> planned)")
    d.add_argument("--only", metavar="NAME,...", help="with no patch applied: preview these patches")
    d.add_argument("--aux-layers", metavar="2,30,58", help="with no patch applied: preview the override")
    r = sub.add_parser("revert", help="restore the original bytes of every patched file")
    r.add_argument("--force", action="store_true", help="also restore files changed since patching")
    for q in (a, s, d, r):  # `patch apply --sglang-root X` reads naturally too
        q.add_argument("--sglang-root", metavar="PATH", default=argparse.SUPPRESS,
                       help="an unpacked SGLang tree to use instead of the installed one")


def _only(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UserError("--only needs at least one patch name", exit_code=2)
    return names


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "patch_cmd", None)
    if cmd is None:
        raise UserError("patch needs an action: apply, status, diff or revert", exit_code=2)
    env = locate(args.sglang_root)
    if cmd == "apply":
        return _apply(env, args)
    if cmd == "status":
        return _status(env, args.json)
    if cmd == "diff":
        text = engine.diff(env, only=_only(args.only), aux_layers=args.aux_layers)
        print(text, end="") if text else out.print("no differences")
        return 0
    rep = engine.revert(env, force=args.force)
    if rep.nothing:
        out.print(f"SGLang {env.version} at {env.package_dir}: nothing to revert (not patched)")
        return 0
    for rel in rep.restored:
        out.print(f"  restored   {rel}")
    for rel in rep.forced:
        out.print(f"  restored   {rel}  (was drifted; --force)")
    for rel in rep.already_original:
        out.print(f"  original   {rel}")
    for rel in rep.left_alone:
        out.print(f"  left as is {rel}  (replaced since patching, no {engine.MARKER} code in it)")
    out.print(f"reverted: {len(rep.restored) + len(rep.forced)} file(s) back to their original bytes "
              "(sha256 checked); patch state removed")
    return 0


def _apply(env, args: argparse.Namespace) -> int:
    pl = engine.apply(env, only=_only(args.only), aux_layers=args.aux_layers, dry_run=args.dry_run)
    head = "would patch" if args.dry_run else "patched"
    out.print(f"SGLang {env.version} ({', '.join(env.families)}) at {env.package_dir}")
    out.print(f"patches: {', '.join(p.name for p in pl.patches)}"
              + (f"; aux layers {pl.options['aux_layers']}" if pl.options.get("aux_layers") else ""))
    if not pl.changes and not args.dry_run:
        out.print("already applied: nothing to do")
        return 0
    for f in pl.files:
        if f.action == "restore":
            out.print(f"  {'would restore' if args.dry_run else 'restored'} {f.rel} (no longer in the set)")
            continue
        if f.result is None:
            continue
        for note in f.result.notes:
            out.print(f"  note: {note}", highlight=False)
        if f.action != "patch":
            continue
        if f.current == f.new:
            out.print(f"  unchanged {f.rel} (already patched)")
            continue
        out.print(f"  {head} {f.rel}")
        for i in f.result.inserted:
            out.print(f"    L{i.line:<5} {i.patch:<20} {i.what}", highlight=False)
    n = len(pl.changes)
    if args.dry_run:
        out.print(f"dry run: every anchor matched; {n} file(s) would change; nothing written")
    else:
        out.print(f"done: {n} file(s) written; originals kept for `sgl-eagle3 patch revert`")
    return 0


def _status(env, as_json: bool) -> int:
    st = engine.status(env)
    if as_json:
        print_json(st)
        return 0
    out.print(f"SGLang {env.version} ({', '.join(env.families) or 'no eagle worker'}) at {env.package_dir}")
    run_ = st.get("running")
    if run_:
        who = f"pid {run_['pid']}" if run_["pid"] else "it holds the lock"
        out.print(f"state: {run_['action'] or 'a patch command'} in progress ({who}); run status "
                  "again when it is done", highlight=False)
    else:
        out.print(f"state: {st['state']}")
    if st["pending"]:
        out.print(f"  a `patch {st['pending']}` was killed mid-way; every file is in a known state: run "
                  f"`sgl-eagle3 patch {st['pending']}` again to finish, or `sgl-eagle3 patch revert`")
    man = st["manifest"]
    if man:
        out.print(f"applied {man['applied_at']} by sgl-eagle3 {man['tool_version']} on SGLang "
                  f"{man['sglang_version']}: {', '.join(man['patches'])}"
                  + (f"; aux layers {man['aux_layers']}" if man.get("aux_layers") else ""))
    for f in st["files"]:
        out.print(f"  {f['state']:<9} {f['path']}  {', '.join(f['patches'])}", highlight=False)
    out.print(f"applicable patches: {', '.join(st['applicable_patches']) or 'none'}")
    probes_in = [f for f in st["files"] if f["state"] != "original" and
                 any(p.startswith(("probes", "accept")) for p in f["patches"])]
    if probes_in:
        out.print("probes: this patch records them (with EAGLE3_PROFILE=1); the plugin keeps its "
                  "phase hooks off, so exactly one route records")
    elif env.has_plugins:
        out.print("probes: not patched; with EAGLE3_PROFILE=1 the plugin records them (SGLang 0.5.11+)")
    else:
        out.print("probes: not patched, and this SGLang has no plugin framework: `patch apply` to profile")
    return 0
