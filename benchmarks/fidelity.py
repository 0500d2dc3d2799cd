"""Profile vs client for every config and concurrency level of a finished sweep (GPU runs).

For each config's ladder level (or its single bench), the probe windows written while that bench
ran are summarised and their steady cycles at the bench's batch size are set beside the client's
per-stream decode tok/s and accept length: the check `sgl-eagle3 profile --bench` makes, over a
whole sweep. Prints a table; --json for the figures.

    python benchmarks/fidelity.py docs/data/h200-2026-12-01/8b-p08/p08
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_eagle3_ext.documents import bench_doc, prof_records  # noqa: E402
from sglang_eagle3_ext.measure import accounting, client_twin  # noqa: E402
from sglang_eagle3_ext.runtime.errors import UserError  # noqa: E402


def rows(sweep_dir: Path) -> list[dict]:
    out = []
    for cdir in sorted((sweep_dir / "configs").iterdir()):
        prof = cdir / "prof.jsonl"
        if not prof.exists():
            continue
        run = prof_records.load(prof)
        ladder = cdir / "ladder.json"
        benches = ([lv["bench"] for lv in bench_doc.load_ladder(ladder)["levels"] if lv.get("bench")]
                   if ladder.exists() else [bench_doc.load_result(cdir / "bench.json")])
        for b in benches:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(b, f)
            client = client_twin.read_client(f.name)
            Path(f.name).unlink()
            aligned = client_twin.aligned_run(run, client)
            if aligned is None:
                continue
            a = client_twin.agreement(accounting.summarize(aligned), client)
            out.append({"config": cdir.name, "concurrency": client["concurrency"], "basis": a["basis"],
                        "profile_tok_s": a["decode_tok_s"]["profile"], "client_tok_s": client["decode_tok_s"],
                        "tok_s_diff_pct": a["decode_tok_s"]["diff_pct"],
                        "profile_al": a["accept_len"]["profile"], "client_al": client["accept_len"],
                        "al_diff_pct": a["accept_len"]["diff_pct"], "windows": aligned.notes[0]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        rs = rows(a.sweep_dir)
    except (UserError, OSError) as exc:
        print(f"fidelity: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(rs, indent=2))
        return 0
    print(f"{'config':<28} {'conc':>4} {'profile tok/s':>13} {'client':>8} {'diff':>7} "
          f"{'profile AL':>10} {'client':>7} {'diff':>7}  basis")
    for r in rs:
        def f(v: float | None, spec: str) -> str:
            return "n/a" if v is None else format(v, spec)
        print(f"{r['config']:<28} {r['concurrency']:>4} {f(r['profile_tok_s'], '13.1f')} "
              f"{f(r['client_tok_s'], '8.1f')} {f(r['tok_s_diff_pct'], '+6.1f')}% "
              f"{f(r['profile_al'], '10.3f')} {f(r['client_al'], '7.3f')} {f(r['al_diff_pct'], '+6.1f')}%  {r['basis']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
