"""Sweep: a fresh server per configuration -> bench -> probe JSONL -> stop; resumable; then analysis.

A fresh server per config because SGLang's accept-length gauges and ``avg_spec_accept_length`` are
cumulative (reference peers-and-anchors E.7; SGLang's own ``bench_speculative.py`` does the same).
The results file is rewritten atomically after every config, so an interrupted sweep loses at
most the config in flight and ``--resume`` skips every config already ``ok``.

The server is made by a *factory* ``factory(cfg: LaunchConfig, sglang_root) -> server-like``
(``start(wait=True)``, ``stop()``, ``url``, ``log_path``; ``tail()`` optional). The default makes a
validated ``server.Server``; tests inject a factory that serves the stand-in HTTP server.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..documents.jsonio import write_json
from ..measure.bench import BenchOptions, run_bench, run_ladder
from ..runtime.bounds import MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK
from ..runtime.errors import UserError
from ..runtime.safeparse import yaml_file

SCHEMA = "eagle3_sweep/1"
MAX_CONFIGS = 10_000
MATRIX_KEYS = ("steps", "topk", "draft_tokens", "nccl", "custom_all_reduce")
MATRIX_EXTRA = ("trees",)  # explicit [steps, topk, draft tokens] items besides the product
TOP_KEYS = {"name", "preset", "launch", "matrix", "baseline", "profile", "profile_every",
            "profile_mode", "bench", "concurrency"}
BENCH_KEYS = {"runs", "warmup", "max_tokens", "prompt", "prompts", "concurrency", "ignore_eos",
              "model"}
LOG_TAIL = 40


@dataclasses.dataclass
class ConfigSpec:
    name: str
    slug: str
    baseline: bool
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    nccl: str | None
    custom_all_reduce: bool

    def key(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("baseline", *MATRIX_KEYS)}


@dataclasses.dataclass
class SweepSpec:
    name: str
    launch: dict[str, Any]
    preset: str | None
    configs: list[ConfigSpec]
    skipped: list[dict[str, Any]]
    bench: dict[str, Any]
    profile: bool
    profile_every: int | None
    profile_mode: str | None
    path: str
    concurrency: list[int] = dataclasses.field(default_factory=lambda: [1])


# ------------------------------------------------------------------ spec


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _onoff(v: Any, where: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("on", "off", "true", "false", "yes", "no"):
        return v.lower() in ("on", "true", "yes")
    raise UserError(f"{where}: custom_all_reduce values are on/off, got {v!r}", exit_code=2)


def _nccl(v: Any) -> str | None:
    return None if v in (None, False, "none", "off") else str(v)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-").lower()


def _suffix(nccl: str | None, car: bool) -> str:
    parts = [f"nccl={nccl}" if nccl else "no-nccl"]
    if not car:
        parts.append("no-custom-ar")
    return " " + " ".join(parts)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and expand a sweep YAML; UserError(2) on anything malformed, before any server starts."""
    import yaml

    p = Path(path)
    try:
        data = yaml_file(p, str(p))  # bounded: a regular file of at most 4 MiB (safeparse)
    except yaml.YAMLError as exc:
        raise UserError(f"{p}: invalid YAML ({str(exc).splitlines()[0]})", exit_code=2) from exc
    if not isinstance(data, dict):
        raise UserError(f"{p}: a sweep file is a mapping (name, launch, matrix, bench)", exit_code=2)
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UserError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; known: "
                        f"{', '.join(sorted(TOP_KEYS))}", exit_code=2)
    matrix = data.get("matrix") or {}
    if not isinstance(matrix, dict) or set(matrix) - set(MATRIX_KEYS) - set(MATRIX_EXTRA):
        raise UserError(f"{p}: matrix keys are {', '.join(MATRIX_KEYS + MATRIX_EXTRA)}", exit_code=2)
    bench = data.get("bench") or {}
    if not isinstance(bench, dict) or set(bench) - BENCH_KEYS:
        raise UserError(f"{p}: bench keys are {', '.join(sorted(BENCH_KEYS))}", exit_code=2)
    launch = data.get("launch") or {}
    if not isinstance(launch, dict):
        raise UserError(f"{p}: launch must be a mapping of launch settings", exit_code=2)
    for k in ("steps", "topk", "draft_tokens", "no_spec", "nccl", "profile", "profile_out", "log"):
        if k in launch:
            raise UserError(f"{p}: launch.{k} is set by the sweep per config; put it under matrix "
                            f"(or the top level)", exit_code=2)
    steps_l = _list(matrix.get("steps", []))
    from .tiers import require_levels

    if "concurrency" in data and "concurrency" in bench:
        raise UserError(f"{p}: concurrency given twice (top level and bench:); keep one", exit_code=2)
    levels = require_levels(data.get("concurrency", bench.get("concurrency", 1)), str(p))
    if 0 in [v for v in steps_l if isinstance(v, int) and not isinstance(v, bool)]:
        steps_l = [v for v in steps_l if v != 0]  # steps 0 = no speculation: the baseline config
        data = dict(data, baseline=True)
    topk_l = _list(matrix.get("topk", 1))
    dt_l = _list(matrix.get("draft_tokens", "auto"))
    nccl_l = [_nccl(v) for v in _list(matrix.get("nccl", None))]
    car_l = [_onoff(v, str(p)) for v in _list(matrix.get("custom_all_reduce", True))]
    for name, vals, top in (("steps", steps_l, MAX_STEPS), ("topk", topk_l, MAX_TOPK)):
        if any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top for v in vals):
            raise UserError(f"{p}: matrix.{name} must be positive integers (1..{top})"
                            + (" (steps 0 = the no-spec baseline)" if name == "steps" else ""), exit_code=2)
    if any(v != "auto" and (isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= MAX_DRAFT_TOKENS)
           for v in dt_l):
        raise UserError(f"{p}: matrix.draft_tokens are integers 2..{MAX_DRAFT_TOKENS} or 'auto'", exit_code=2)
    n = len(steps_l) * len(topk_l) * len(dt_l) * len(nccl_l) * len(car_l)
    if n > MAX_CONFIGS:  # before the product is built (a few lines of YAML can ask for billions)
        raise UserError(f"{p}: the matrix asks for {n} configs; a sweep runs at most {MAX_CONFIGS} "
                        "(one server start each)", exit_code=2)
    trees_l = []
    for t in _list(matrix.get("trees", [])):
        ok = (isinstance(t, list) and len(t) == 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in t))
        if not ok or not 1 <= t[0] <= MAX_STEPS or not 1 <= t[1] <= MAX_TOPK or t[2] < 2 \
                or (t[1] == 1 and t[2] != t[0] + 1) or t[0] * t[1] + 1 < t[2]:
            raise UserError(f"{p}: matrix.trees items are [steps, topk, draft_tokens] with "
                            f"steps*topk+1 >= draft_tokens >= 2 (topk 1: steps+1), got {t!r}", exit_code=2)
        trees_l.append(tuple(t))
    baseline = bool(data.get("baseline", True))
    if not steps_l and not trees_l and not baseline:
        raise UserError(f"{p}: nothing to run (no matrix.steps and baseline: false)", exit_code=2)

    configs: list[ConfigSpec] = []
    skipped: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(c: ConfigSpec) -> None:
        if c.slug not in seen:
            seen.add(c.slug)
            configs.append(c)

    for nccl, car in itertools.product(nccl_l, car_l):
        sfx = _suffix(nccl, car)
        if baseline:
            add(ConfigSpec(f"no-spec{sfx}", _slug(f"no-spec{sfx}"), True, None, None, None, nccl, car))
        for s, k, d in itertools.product(steps_l, topk_l, dt_l):
            if k == 1:
                d = s + 1  # SGLang forces draft tokens = steps + 1 at topk 1 (server_args)
            elif d == "auto":
                raise UserError(f"{p}: draft_tokens 'auto' only means steps+1 at topk 1; give numbers "
                                f"for topk {k}", exit_code=2)
            name = f"eagle3 s{s} k{k} d{d}{sfx}"
            if s * k + 1 < d:  # SGLang bench_speculative.py skips these trees too
                skipped.append({"name": name, "reason": f"steps*topk+1 = {s * k + 1} < draft_tokens {d}"})
                continue
            add(ConfigSpec(name, _slug(name), False, s, k, d, nccl, car))
        for s, k, d in trees_l:  # explicit (steps, topk, draft tokens): a budget per tree
            name = f"eagle3 s{s} k{k} d{d}{sfx}"
            add(ConfigSpec(name, _slug(name), False, s, k, d, nccl, car))
    pe = data.get("profile_every")
    return SweepSpec(name=str(data.get("name") or p.stem), launch=launch,
                     preset=data.get("preset"), configs=configs, skipped=skipped, bench=bench,
                     profile=bool(data.get("profile", True)),
                     profile_every=int(pe) if pe is not None else None,
                     profile_mode=data.get("profile_mode"), path=str(p), concurrency=levels)


def launch_config(spec: SweepSpec, c: ConfigSpec, cdir: Path) -> Any:
    """The LaunchConfig of one config (preset, then the sweep's launch keys, then the cell)."""
    from ..serve import launch_config as lcfg

    base = lcfg.load_preset(spec.preset) if spec.preset else lcfg.LaunchConfig()
    if spec.launch:
        given = lcfg.config_from_mapping(spec.launch, f"{spec.path}: launch")
        keys = {str(k).replace("-", "_") for k in spec.launch}
        base = lcfg.override(base, **{k: getattr(given, k) for k in keys})
    extra = list(base.extra_args)
    if not c.custom_all_reduce and "--disable-custom-all-reduce" not in extra:
        extra.append("--disable-custom-all-reduce")
    fields: dict[str, Any] = {
        "nccl": c.nccl or "none", "extra_args": extra, "log": str(cdir / "server.log"),
        "name": f"{spec.name}-{c.slug}",
    }
    if c.baseline:
        fields["no_spec"] = True
    else:
        fields.update(steps=c.steps, topk=c.topk, draft_tokens=c.draft_tokens, no_spec=False,
                      profile=spec.profile)
        if spec.profile:  # profile settings without profiling are an input error for launch
            fields.update(profile_out=str(cdir / "prof.jsonl"), profile_every=spec.profile_every,
                          profile_mode=spec.profile_mode)
    return lcfg.override(base, **fields)


def check_paths(spec: SweepSpec) -> None:
    """Every config's launch settings and model folders, before the first server starts.

    A missing model folder (or a preset variable left unset) would otherwise fail every config in
    turn, one server start and one error line each, and still end in a results file. Here it is
    one line naming each distinct problem, exit 2, nothing started or written. Only what needs no
    SGLang is checked (the folders hold a config.json); the release's own rules stay with the
    per-config validation."""
    from ..serve.release_flags import read_architecture

    problems: dict[str, list[str]] = {}
    for c in spec.configs:
        try:
            cfg = launch_config(spec, c, Path("."))
            if not cfg.model:
                raise UserError("no target model: set launch: {model: PATH} or a preset that sets model:",
                                exit_code=2)
            read_architecture(cfg.model, "model", "set launch: {model: PATH} in the sweep file")
            if not c.baseline and cfg.draft:
                read_architecture(cfg.draft, "draft", "set launch: {draft: PATH} in the sweep file")
        except UserError as exc:
            problems.setdefault(str(exc), []).append(c.name)
    if not problems:
        return
    total = len(spec.configs)
    bad = {n for names in problems.values() for n in names}
    speculative = [c.name for c in spec.configs if not c.baseline]

    def which(names: list[str]) -> str:
        if len(names) == total:
            return ""
        return " [every speculative config]" if names == speculative else f" [{', '.join(names)}]"

    parts = [msg + which(names) for msg, names in problems.items()]
    scope = f"none of its {total} configs can" if len(bad) == total else f"{len(bad)} of its {total} configs cannot"
    raise UserError(f"{spec.path}: {scope} start, nothing started: {'; '.join(parts)}", exit_code=2)


def default_factory(cfg: Any, sglang_root: str | None) -> Any:
    """Validate against the installed (or --sglang-root) SGLang, then a real server.Server."""
    from ..runtime.sglang_env import locate
    from ..serve import flags, server

    flags.validate(cfg, locate(sglang_root))
    return server.Server(cfg)


# ------------------------------------------------------------------ running


def load_results(path: Path) -> dict[str, Any] | None:
    """The results file (documents/sweep_doc.py: the one bounded, typed reader); None if absent."""
    from ..documents.sweep_doc import load_results as _load

    return _load(path)


def _tail_of(srv: Any, exc: BaseException | None) -> list[str]:
    tail = getattr(exc, "log_tail", None)
    if tail:
        return list(tail)[-LOG_TAIL:]
    if srv is not None and hasattr(srv, "tail"):
        try:
            return list(srv.tail())[-LOG_TAIL:]
        except Exception:  # noqa: BLE001 - a log tail is best effort
            pass
    log = getattr(srv, "log_path", None)
    if log and Path(log).exists():
        return Path(log).read_text(errors="replace").splitlines()[-LOG_TAIL:]
    return []


def profile_summary(path: Path, batch: int | None = None) -> dict[str, Any] | None:
    """Cycle-weighted summary of a config's probe JSONL (accounting.summarize), or None if absent.

    ``batch``: the concurrency the config's main bench ran at. A ladder puts cycles of every batch
    size into one file, so the phases, accept length and tok/s the analysis reads become the steady
    cycles at that batch size (measured on the H200: the mix of 1, 8 and 32 streams put the 3-step
    cycle at 8.24 ms where one stream's was 6.49 ms); the all-batch figures stay under
    ``all_batches``."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    from ..documents import prof_records
    from ..measure import accounting

    try:
        s = accounting.summarize(prof_records.load(path))
    except UserError as exc:
        return {"error": str(exc)}
    bb = (s.get("by_batch") or {}).get(str(batch)) if batch else None
    if bb and bb.get("phases") and bb.get("per_stream_tok_s"):
        s["all_batches"] = {k: s[k] for k in ("phases", "accept_len", "eff_tok_s", "basis")}
        s.update(phases=bb["phases"], accept_len=bb.get("accept_len"), eff_tok_s=bb["per_stream_tok_s"],
                 basis=f"steady batch-{batch}")
    return s


def refresh_profiles(doc: dict[str, Any], sweep_dir: Path) -> None:
    """Re-read every config's probe file (a report of a sweep run by an older version)."""
    for c in doc.get("configs", []):
        prof = sweep_dir / "configs" / str(c.get("slug")) / "prof.jsonl"
        conc = ((c.get("bench") or {}).get("params") or {}).get("concurrency")
        if prof.exists():
            c["profile"] = profile_summary(prof, conc)


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, resume: bool = False,
              factory: Callable[[Any, str | None], Any] | None = None,
              sglang_root: str | None = None, log: Callable[[str], None] = print,
              progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Run every config not yet finished; returns (and keeps writing) the results document."""
    factory = factory or default_factory
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res_path = out / "results.json"
    old = load_results(res_path)
    if old and not resume:
        raise UserError(f"{res_path} exists: pass --resume to continue that sweep, or another --out",
                        exit_code=2)
    done = {c["slug"]: c for c in (old or {}).get("configs", [])}
    doc: dict[str, Any] = {
        "schema": SCHEMA, "name": spec.name, "sweep_file": spec.path,
        "started": (old or {}).get("started") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "skipped": spec.skipped, "configs": [],
    }
    records = {c.slug: done.get(c.slug) for c in spec.configs}

    def save() -> None:
        doc["configs"] = [r for r in records.values() if r is not None]
        doc["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_json(res_path, doc)

    total = len(spec.configs)
    for i, c in enumerate(spec.configs):
        prev = records.get(c.slug)
        if prev and prev.get("status") == "ok":
            log(f"[{i + 1}/{total}] {c.name}: done earlier, skipped (--resume)")
            continue
        if progress:
            progress(c.name, i, total)
        records[c.slug] = _run_one(spec, c, out / "configs" / c.slug, factory, sglang_root, log,
                                   f"[{i + 1}/{total}]", save_partial=lambda r, s=c.slug: (
                                       records.__setitem__(s, r), save()))
        save()
    save()
    return doc


def _run_one(spec: SweepSpec, c: ConfigSpec, cdir: Path, factory: Callable[[Any, str | None], Any],
             sglang_root: str | None, log: Callable[[str], None], tag: str,
             save_partial: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    cdir.mkdir(parents=True, exist_ok=True)
    prof = cdir / "prof.jsonl"
    if prof.exists():
        prof.unlink()  # a re-run must not append to a failed attempt's windows
    rec: dict[str, Any] = {"name": c.name, "slug": c.slug, "baseline": c.baseline, **c.key(),
                           "status": "running", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "bench": None, "profile": None, "error": None, "log_tail": None}
    save_partial(rec)
    srv = None
    t0 = time.monotonic()
    try:
        cfg = launch_config(spec, c, cdir)
        rec["launch"] = {k: v for k, v in dataclasses.asdict(cfg).items() if v not in (None, [], {})}
        log(f"{tag} {c.name}: starting server")
        srv = factory(cfg, sglang_root)
        srv.start(wait=True)
        rec["log"] = str(getattr(srv, "log_path", "") or "")
        log(f"{tag} {c.name}: ready after {time.monotonic() - t0:.0f} s, benchmarking {srv.url}")
        b = spec.bench
        prompts = b.get("prompts") or ([b["prompt"]] if b.get("prompt") else None)
        opts = BenchOptions(url=srv.url, label=c.name, runs=int(b.get("runs", 5)),
                            warmup=int(b.get("warmup", 1)), max_tokens=int(b.get("max_tokens", 1000)),
                            concurrency=spec.concurrency[0],
                            ignore_eos=bool(b.get("ignore_eos", False)), model=b.get("model"))
        if prompts:
            opts.prompts = [str(x) for x in _list(prompts)]
        if len(spec.concurrency) > 1:
            # one ladder per config; "bench" keeps the first level so single-level readers still work
            ladder = run_ladder(opts, spec.concurrency)
            write_json(cdir / "ladder.json", ladder)
            rec["ladder"] = {k: v for k, v in ladder.items() if k != "levels"} | {
                "levels": [{"concurrency": lv["concurrency"], "summary": lv["summary"]} for lv in ladder["levels"]]}
            result = ladder["levels"][0]["bench"]
            if all(lv["summary"]["ok_runs"] == 0 for lv in ladder["levels"]):
                raise RuntimeError(f"every bench request failed: {result['errors'][:1]}")
        else:
            result = run_bench(opts)
        write_json(cdir / "bench.json", result)
        rec["bench"] = result
        if result["summary"]["ok_runs"] == 0 and "ladder" not in rec:
            raise RuntimeError(f"every bench request failed: {result['errors'][:1]}")
        rec["status"] = "ok"
        s = result["summary"]
        al = s["accept_length"]
        if "ladder" in rec:
            log(f"{tag} {c.name}: per-stream tok/s by concurrency " + ", ".join(
                f"{lv['concurrency']}: {lv['summary']['per_stream_tok_s'] or 0:.1f}" for lv in rec["ladder"]["levels"]))
        else:
            log(f"{tag} {c.name}: {s['decode_tok_s']['avg']:.1f} tok/s avg, {s['decode_tok_s']['peak']:.1f} "
                f"peak" + (f", accept length {al:.2f}" if al else ""))
    except KeyboardInterrupt:
        rec["status"] = "interrupted"
        rec["error"] = "interrupted"
        _stop(srv)
        srv = None
        save_partial(rec)
        raise
    except Exception as exc:  # noqa: BLE001 - one failed config must not stop the sweep
        rec["status"] = "failed"
        rec["error"] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, UserError) else str(exc)
        if not isinstance(exc, (UserError, RuntimeError, OSError)):
            rec["traceback"] = traceback.format_exc().splitlines()[-8:]
        _stop(srv)
        rec["log_tail"] = _tail_of(srv, exc)
        srv = None
        log(f"{tag} {c.name}: FAILED: {rec['error']}")
    finally:
        _stop(srv)
        rec["elapsed_s"] = round(time.monotonic() - t0, 1)
    rec["profile"] = profile_summary(prof, spec.concurrency[0])
    return rec


def _stop(srv: Any) -> None:
    if srv is not None:
        try:
            srv.stop()
        except Exception:  # noqa: BLE001 - stopping is best effort; the group kill is the server's job
            pass


# ------------------------------------------------------------------ analysis


def _cycle_ms(rec: dict[str, Any]) -> float | None:
    """The profile summary's mean cycle: steady-state cycles when the records have the split
    (accounting.summarize basis "steady", at the bench's batch size when the records split it), else all cycles (said in the analysis notes)."""
    p = rec.get("profile") or {}
    return ((p.get("phases") or {}).get("cycle") or {}).get("mean_ms")


def _base_for(rec: dict[str, Any], bases: list[dict[str, Any]]) -> dict[str, Any] | None:
    same = [b for b in bases if b["nccl"] == rec["nccl"] and b["custom_all_reduce"] == rec["custom_all_reduce"]]
    pool = same or bases
    return max(pool, key=lambda b: b["bench"]["summary"]["decode_tok_s"]["avg"] or 0) if pool else None


def analyse(doc: dict[str, Any]) -> dict[str, Any]:
    """Cost-model fit, break-even per config, predicted best k, prediction vs measurement."""
    from ..measure import analysis

    ok = [r for r in doc["configs"] if r.get("status") == "ok" and r.get("bench")]
    bases = [r for r in ok if r["baseline"]]
    spec = [r for r in ok if not r["baseline"]]
    notes: list[str] = []
    rows = []
    for r in spec:
        b = _base_for(r, bases)
        btps = b["bench"]["summary"]["decode_tok_s"]["avg"] if b else None
        cyc = _cycle_ms(r)
        al = r["bench"]["summary"]["accept_length"]
        if al is None:
            al = (r.get("profile") or {}).get("accept_len")
        be = analysis.break_even_accept_len(cyc, btps) if cyc and btps else None
        rows.append({"name": r["name"], "steps": r["steps"], "topk": r["topk"], "cycle_ms": cyc,
                     "accept_length": al, "break_even": be, "baseline": b["name"] if b else None,
                     "baseline_tok_s": btps, "tok_s": r["bench"]["summary"]["decode_tok_s"]["avg"],
                     "beats": (al > be) if (al is not None and be is not None) else None})
    result: dict[str, Any] = {"break_even": rows, "cost_model": None, "predicted": None,
                              "recommendation": None, "notes": notes}
    # Fit within one (nccl, custom AR) family, the one holding the most profiled spec configs.
    fams: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for r in spec:
        if _cycle_ms(r) is not None and r["topk"] == 1:
            fams.setdefault((r["nccl"], r["custom_all_reduce"]), []).append(r)
    fam = max(fams.values(), key=len) if fams else []
    unsplit = [r["name"] for r in fam if not (r.get("profile") or {}).get("basis", "all").startswith("steady")]
    if unsplit:
        notes.append(f"cycle times of {', '.join(unsplit)} are over all cycles (no steady split in "
                     "their probe records), request starts included")
    if len({r["steps"] for r in fam}) >= 2:
        model = analysis.fit_cost_model([(r["steps"], _cycle_ms(r)) for r in fam])
        result["cost_model"] = model.to_dict() | {"family": fam[0]["name"].split(" ", 4)[-1].strip()}
        if model.cd < 0:  # a draft step costs time: the data cannot support a negative slope
            seen = ", ".join(f"{r['steps']}: {_cycle_ms(r):.2f}" for r in sorted(fam, key=lambda r: r["steps"]))
            result["cost_model"]["warning"] = (
                f"a negative cost per step is a fit the data does not support: the measured cycle did not grow "
                f"with the step count (steps: ms = {seen}), so differences between the configs (noise, request "
                f"starts in all-cycle figures) are larger than a draft step's cost; the model's tok/s follow "
                f"the measured cycles only roughly and say nothing outside the measured step counts")
        big = max(fam, key=lambda r: r["steps"])
        rates = (big.get("profile") or {}).get("per_position") or []
        b = _base_for(big, bases)
        bstep = 1000.0 / b["bench"]["summary"]["decode_tok_s"]["avg"] if b else None
        if rates:
            preds = analysis.predict_with_cost_model(model, rates, big["steps"], bstep)
            best = max((p for p in preds if p.kind != "baseline"), key=lambda p: p.tok_s)
            result["best_k"] = best.steps
            result["recommendation"] = analysis.recommend(preds)
            try:
                one = analysis.predict_from_run(big["profile"], bstep)
            except UserError as exc:
                notes.append(f"one-run prediction unavailable: {exc}")
                one = []
            measured = {r["steps"]: r for r in fam}
            result["predicted"] = {
                "from": big["name"],
                "rows": [{"steps": p.steps, "kind": p.kind, "pred_accept_length": p.accept_len,
                          "pred_cycle_ms": p.cycle_ms, "pred_tok_s": p.tok_s,
                          # the cost-model figure the recommendation quotes, beside this run's
                          "model_tok_s": next((q.tok_s for q in preds if q.steps == p.steps), None),
                          "meas_accept_length": (measured[p.steps]["bench"]["summary"]["accept_length"]
                                                 if p.steps in measured else None),
                          "meas_tok_s": (measured[p.steps]["bench"]["summary"]["decode_tok_s"]["avg"]
                                         if p.steps in measured else
                                         (b["bench"]["summary"]["decode_tok_s"]["avg"] if p.steps == 0 and b else None)),
                          } for p in one],
            }
        else:
            notes.append(f"{big['name']} has no per-position acceptance: no predicted best k")
    else:
        notes.append("cost model needs probe cycle times for >= 2 step counts at topk 1")
    if result["recommendation"] is None:
        result["recommendation"] = _measured_sentence(ok, bases)
    return result


def _measured_sentence(ok: list[dict[str, Any]], bases: list[dict[str, Any]]) -> str:
    spec = [r for r in ok if not r["baseline"]]
    if not ok:
        return "No configuration finished; see the failures above."
    best = max(ok, key=lambda r: r["bench"]["summary"]["decode_tok_s"]["avg"] or 0)
    v = best["bench"]["summary"]["decode_tok_s"]["avg"]
    if best["baseline"] and spec:
        return f"No speculative configuration beat the baseline: serve {best['name']} ({v:.1f} tok/s)."
    b = _base_for(best, bases) if not best["baseline"] else None
    vs = f", {(v / b['bench']['summary']['decode_tok_s']['avg'] - 1) * 100:+.1f}% vs {b['name']}" if b else ""
    return f"Fastest measured: {best['name']} at {v:.1f} tok/s{vs}."
