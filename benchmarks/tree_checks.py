"""Check recorded tree runs against the construction (docs/data/*: a folder with tiny-tree.json
and trees/, as the tree rounds wrote them).

    python3 benchmarks/tree_checks.py docs/data/h200-2026-12-02-r6/trees3
    python3 benchmarks/tree_checks.py --long docs/data/h200-2026-12-02-r7/long

Per config: SGLang's accept length (the client's, from SGLang's counters) at each level against
tiny.json's chat-request expectation (goal 3 %); the tree probes' accept length over every
window against the plain probes' (goal 0.5 %); the tree-derived chain at 3 / 5 steps against the
chain servers (goal 2 %); then the chain-or-tree verdict (sweep --report prints the same).
Exit 1 when a goal is missed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime.probes import tree as ptree  # noqa: E402
from sglang_eagle3_ext.tune import treeverdict  # noqa: E402
from sglang_eagle3_ext.tune.tiers import read_records  # noqa: E402


def main(root: Path) -> int:
    info = json.loads((root / "tiny-tree.json").read_text())["tree"]
    exp = info.get("expected_accept_len_chat", {}).get("256", {})
    doc = json.loads((root / "trees" / "results.json").read_text())
    bad = 0
    chain_server: dict[int, float] = {}
    derived: dict[str, dict[str, float]] = {}
    for c in doc["configs"]:
        if c.get("status") != "ok":
            print(f"{c['name']}: {c.get('status')} {c.get('error', '')}")
            bad += 1
            continue
        key = f"s{c['steps']}.k{c['topk']}.d{c['draft_tokens']}"
        want = exp.get(key)
        if want is None:
            from sglang_eagle3_ext.tiny import trees

            print(f"{key}: not in tiny.json's grid; expectation needs maps.json ({trees.__name__})")
        for lv in (c.get("ladder") or {}).get("levels", []):
            got = (lv.get("summary") or {}).get("accept_length")
            if got is None or want is None:
                continue
            d = 100 * (got / want - 1)
            ok = abs(d) <= 3.0
            bad += not ok
            print(f"{key} at {lv['concurrency']:>2} streams: SGLang {got:.3f} vs expected {want:.3f} "
                  f"({d:+.1f} %) {'OK' if ok else 'MISS'}")
            if c["topk"] == 1 and lv["concurrency"] == 1:
                chain_server[int(c["steps"])] = got
        recs = read_records(root / "trees" / "configs" / c["slug"] / "prof.jsonl")
        tr = ptree.merge([r.get("tree") for r in recs if r.get("tree")])
        acc = sum(r.get("tokens", 0) or 0 for r in recs)
        ver = sum(r.get("verifies", 0) or r.get("requests", 0) or 0 for r in recs)
        if tr is None:
            print(f"{key}: no tree field in the probe records (hooks not applied?)")
            bad += 1
            continue
        line = f"{key}: tree probes {tr['accept_len']:.3f} over {tr['cycles']} verifies"
        if acc and ver:
            d = 100 * (tr["accept_len"] / (acc / ver) - 1)
            ok = abs(d) <= 0.5
            bad += not ok
            line += f", plain probes {acc / ver:.3f} ({d:+.2f} %) {'OK' if ok else 'MISS'}"
        print(line + f"; per depth {tr['per_depth']}; ranks {tr['rank_hist']}")
        if c["topk"] > 1:
            # the single-stream replay (same tokens as a chain server), token-weighted over windows
            rep = ptree.merge_replay([r["tree"].get("chain_replay") for r in recs if r.get("tree")])
            derived[key] = {s: v["accept_len_est"] for s, v in rep.items()}
            for s, v in rep.items():
                print(f"    chain replay {s} steps (1 stream): estimate {v['accept_len_est']:.3f}, lower bound "
                      f"{v['accept_len_lower']:.3f}, {v['unknown']} unknown agreements of {v['tokens']} tokens")
            print("    chain from this tree: " + ", ".join(
                f"{s} steps {v['accept_len']:.3f}{'' if v['exact'] else ' (lower bound on ' + str(v['lower_bound_cycles']) + ' verifies)'}"
                for s, v in tr["chain"].items()))
    for key, ch in derived.items():
        for s, server in chain_server.items():
            if str(s) in ch and ch[str(s)]:
                d = 100 * (ch[str(s)] / server - 1)
                ok = abs(d) <= 2.0
                bad += not ok
                print(f"{key} -> chain {s} steps {ch[str(s)]:.3f} vs chain server {server:.3f} "
                      f"({d:+.1f} %) {'OK' if ok else 'MISS'}")
    v = treeverdict.verdict(doc, root / "trees")
    if v:
        print("\n".join(treeverdict.lines(v)))
    print(f"{'all goals met' if not bad else f'{bad} goal(s) missed'}")
    return 1 if bad else 0


def long_check(root: Path) -> int:
    """The long replays: one long single-stream request per server, the probes flushed around it
    (``long.json``: the counter check of tools/gpu/plans/moe-scan-and-long-trees.yaml). Each tree server's chain replay against the chain
    server of that step count (SGLang's counter over the same request, the same greedy tokens);
    goal 2 %. Also the probes against SGLang's counter on every server (goal 0.5 %)."""
    docs = {}
    for f in sorted((root / "trees").glob("*/long.json")):
        m = re.search(r"s(\d+)-k(\d+)-d(\d+)", f.parent.name)
        if m:
            docs[tuple(int(x) for x in m.groups())] = json.loads(f.read_text())
    chain = {s: d["sglang"]["accept_len"] for (s, k, _), d in docs.items() if k == 1}
    bad = 0
    for (s, k, dt), d in sorted(docs.items()):
        a, b = d["probes"]["accept_len"], d["sglang"]["accept_len"]
        dev = 100 * (a / b - 1)
        bad += abs(dev) > 0.5
        print(f"{s}x{k}x{dt}: {d['sglang']['generation_tokens']:.0f} tokens at {d['streams']} stream(s); probes "
              f"{a:.4f} vs SGLang {b:.4f} ({dev:+.2f} %) {'OK' if abs(dev) <= 0.5 else 'MISS'}")
        for st, rep in (d["probes"].get("chain_replay") or {}).items():
            if k == 1 or int(st) not in chain:
                continue
            dev = 100 * (rep["accept_len_est"] / chain[int(st)] - 1)
            bad += abs(dev) > 2.0
            print(f"    chain replay {st} steps: {rep['accept_len_est']:.3f} (lower bound {rep['accept_len_lower']:.3f}, "
                  f"{rep['unknown']} unknown of {rep['tokens']} tokens) vs chain server {chain[int(st)]:.3f} "
                  f"({dev:+.1f} %) {'OK' if abs(dev) <= 2.0 else 'MISS'}")
    print(f"{'all goals met' if not bad else f'{bad} goal(s) missed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--long"]:
        raise SystemExit(long_check(Path(sys.argv[2])))
    raise SystemExit(main(Path(sys.argv[1])))
