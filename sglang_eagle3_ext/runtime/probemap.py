"""The probe map: the patch specs in ``patches/*.yaml``, loaded, validated and selected for one
SGLang tree. Both routes read it: the source patcher (``patcher/``) inserts at its anchors, the
plugin (``runtime/plugin/hookplan.py``) compiles the same entries to hook targets. Stdlib at module
level (PyYAML only inside ``load_specs``), because the plugin loads it inside SGLang's processes.


A spec names *where* to insert (file, class, method, anchor calls) and *what* (a statement
template); the engine in ``transform.py`` knows only a handful of generic insertion kinds.
Version quirks (renamed fields, moved methods) are written in the YAML, never in Python branches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .resources import data_dir
from .safeparse import yaml_load
from .sglang_env import SGLangEnv, parse_version

KINDS = ("decode-probes", "method-entry", "after-assign")
DOC_KEYS = ("why", "how", "upstream", "removal")
PATCHES_DIR = data_dir("patches")


def version_matches(version: str, constraint: str | None) -> bool:
    """``constraint`` is comma-separated comparators, e.g. ``">=0.5.3.post2,<0.5.12"``."""
    if not constraint:
        return True
    v = parse_version(version)
    for part in constraint.split(","):
        m = re.match(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$", part)
        if not m:
            raise UserError(f"bad version constraint {part!r} in a patch spec")
        op, ref = m.group(1), parse_version(m.group(2))
        ok = {">=": v >= ref, "<=": v <= ref, "==": v == ref, "!=": v != ref,
              ">": v > ref, "<": v < ref}[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Anchor:
    """One phase call inside the decode branch: ``call`` is the dotted callee, e.g. ``self.verify``."""

    phase: str
    call: str
    wrap: str = "statement"  # "statement" | "with" (the enclosing with-block whose only body it is)
    count: int = 1
    exclude_kwargs: tuple[str, ...] = ()
    hook: str | None = None  # plugin route: "Class.method" in the patch's file that the call reaches


@dataclass(frozen=True)
class Patch:
    name: str
    kind: str
    source: str  # the YAML file it came from
    doc: dict[str, str]
    family: tuple[str, ...]
    versions: str | None
    file: str  # relative to the sglang/ package; may be a glob for method-entry
    cls: str | None
    cls_regex: str | None
    method: tuple[str, ...]  # alternatives: exactly one must exist
    module: str  # "probes" | "layers": which of our modules the inserted code calls
    decode_branch: tuple[dict[str, str], ...] = ()
    anchors: tuple[Anchor, ...] = ()
    accept: dict[str, Any] | None = None
    param: str | None = None
    value: str | None = None
    statement: str | None = None
    requires_option: str | None = None
    accept_hook: dict[str, Any] | None = None  # plugin route: where its AROUND hook reads accepts
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def applies_to(self, env: SGLangEnv) -> bool:
        fam_ok = not self.family or any(f in env.families for f in self.family)
        return fam_ok and version_matches(env.version, self.versions)

    def accept_field(self, version: str) -> str | None:
        """The V1 verify_output field holding accepted drafts per request, for this release."""
        if not self.accept:
            return None
        for alt in self.accept.get("fields", []):
            if version_matches(version, alt.get("versions")):
                return alt["field"]
        return None


def _tuple(v: Any) -> tuple:
    if v is None:
        return ()
    return tuple(v) if isinstance(v, list) else (v,)


def _parse_patch(d: dict[str, Any], source: str, default_family: Any) -> Patch:
    where = f"{source}: patch {d.get('name', '?')!r}"
    for key in ("name", "kind", "file", "method"):
        if key not in d:
            raise UserError(f"{where}: missing key {key!r}")
    if d["kind"] not in KINDS:
        raise UserError(f"{where}: kind must be one of {', '.join(KINDS)}")
    missing = [k for k in DOC_KEYS if not str(d.get(k) or "").strip()]
    if missing:  # vllm-ascend style: every patch says why, how, upstream and how it goes away
        raise UserError(f"{where}: missing documentation key(s) {', '.join(missing)}")
    anchors = tuple(
        Anchor(phase=phase, call=a["call"], wrap=a.get("wrap", "statement"),
               count=int(a.get("count", 1)), exclude_kwargs=_tuple(a.get("exclude_kwargs")),
               hook=a.get("hook"))
        for phase, a in (d.get("anchors") or {}).items()
    )
    if d["kind"] == "decode-probes" and not anchors:
        raise UserError(f"{where}: decode-probes needs anchors")
    if not d.get("class") and not d.get("class_regex"):
        raise UserError(f"{where}: needs class or class_regex")
    return Patch(
        name=d["name"], kind=d["kind"], source=source,
        doc={k: str(d[k]).strip() for k in DOC_KEYS},
        family=_tuple(d.get("family", default_family)), versions=d.get("versions"),
        file=d["file"], cls=d.get("class"), cls_regex=d.get("class_regex"),
        method=_tuple(d["method"]), module=d.get("module", "probes"),
        decode_branch=tuple(d.get("decode_branch") or ()), anchors=anchors,
        accept=d.get("accept"), param=d.get("param"), value=d.get("value"),
        statement=d.get("statement"), requires_option=d.get("requires_option"),
        accept_hook=d.get("accept_hook"), raw=d,
    )


def load_specs(directory: Path | None = None) -> list[Patch]:
    """Every patch of every ``*.yaml`` in ``directory`` (default: the package's ``patches/``)."""
    import yaml  # here, not at module level: this module runs inside SGLang's processes

    directory = directory or PATCHES_DIR
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise UserError(f"no patch specs found in {directory}")
    patches: list[Patch] = []
    for f in files:
        try:
            data = yaml_load(f.read_text(encoding="utf-8"), f.name) or {}
        except yaml.YAMLError as exc:
            raise UserError(f"{f.name}: invalid YAML ({exc})") from exc
        for d in data.get("patches") or []:
            patches.append(_parse_patch(d, f.name, data.get("family")))
    names = [p.name for p in patches]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise UserError(f"duplicate patch name(s) in {directory}: {', '.join(dups)}")
    return patches


def select(patches: list[Patch], env: SGLangEnv, *, only: list[str] | None,
           options: dict[str, Any]) -> list[Patch]:
    """The patches to apply to ``env``: applicable ones, narrowed by ``--only``; a patch with
    ``requires_option`` joins only when that option (e.g. ``aux_layers``) has a value."""
    applicable = [p for p in patches if p.applies_to(env)]
    by_name = {p.name: p for p in applicable}
    if only:
        known = {p.name for p in patches}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise UserError(f"--only: unknown patch {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(known))}", exit_code=2)
        wrong = [n for n in only if n not in by_name]
        if wrong:
            raise UserError(f"--only: {', '.join(wrong)} does not apply to SGLang {env.version} "
                            f"(families {', '.join(env.families) or 'none'}); applicable: "
                            f"{', '.join(sorted(by_name)) or 'none'}", exit_code=2)
        chosen = [by_name[n] for n in only]
    else:
        chosen = [p for p in applicable if not p.requires_option]
    for p in applicable:  # an option asks for its patch even under --only
        if p.requires_option and options.get(p.requires_option) and p not in chosen:
            chosen.append(p)
    for opt, value in options.items():
        if value and not any(p.requires_option == opt for p in chosen):
            owners = [p.name for p in patches if p.requires_option == opt]
            raise UserError(f"--{opt.replace('_', '-')}: {', '.join(owners) or 'no patch'} does not "
                            f"apply to SGLang {env.version}", exit_code=2)
    for p in chosen:
        if p.requires_option and not options.get(p.requires_option):
            flag = "--" + p.requires_option.replace("_", "-")
            raise UserError(f"patch {p.name} needs {flag}", exit_code=2)
    return chosen
