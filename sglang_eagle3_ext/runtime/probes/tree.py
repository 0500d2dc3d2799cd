"""Tree-aware probes (topk > 1): per verify, the accepted depth and the sibling rank of each
accepted node, and from one tree run the chain's accept length at every depth.

Inputs per cycle, as SGLang 0.5.16 has them (../shared/reference/sglang-adaptive-runtime.md,
"Trees"): ``top_scores_index`` [bs, D-1] and ``parent_list`` [bs, (topk+1) + (steps-2) topk]
(``organize_draft_results`` / the draft graph's outputs, passed to ``build_eagle_verify_input``
every cycle) and ``accept_index`` [bs, steps+1] (``eagle_sample``: flat positions b*D + p of the
root and each accepted node, -1 padded). Flat position p >= 1 is score-list index
``top_scores_index[p-1]``: below topk a depth-1 node of rank idx; else j = idx - topk,
depth 2 + j // topk^2, parent slot (j % topk^2) // topk, rank j % topk; the parent of slot s at
depth d >= 2 is ``parent_list[topk (d-2) + 1 + s]`` (a score-list index).

The V2 worker must not synchronise: ``AsyncCapture`` copies the three tensors with
``non_blocking=True`` into pinned host buffers and records a CUDA event; ``drain`` decodes the
cycles whose event has completed (the next cycle, or the window's end). Standard library only at
module level; torch is touched only through the objects handed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeInfo:
    depth: int
    rank: int
    parent: int  # score-list index, -1 = root


def node_info(idx: int, parent_list: Sequence[int], topk: int) -> NodeInfo:
    if idx < topk:
        return NodeInfo(1, idx, -1)
    j = idx - topk
    depth = 2 + j // (topk * topk)
    within = j % (topk * topk)
    slot, rank = divmod(within, topk)
    return NodeInfo(depth, rank, int(parent_list[topk * (depth - 2) + 1 + slot]))


@dataclass
class CycleTree:
    depth: int  # accepted drafts (= accepted depth)
    ranks: list[int]  # sibling rank of each accepted node, depth order
    chain: dict[int, tuple[int, bool]]  # steps' -> (chain accepted drafts, exact?)
    # per token this verify settles (root, accepted nodes): was its rank-0 child the target's
    # next token? None = not verified (pruned / last depth). Greedy output is the same for chain
    # and tree, so these replay the chain server on the very same tokens (TreeStats.replay).
    agree: list[bool | None] = field(default_factory=list)


def decode_cycle(accept_row: Sequence[int], row: int, top_scores_index: Sequence[int],
                 parent_list: Sequence[int], topk: int, steps: int, draft_tokens: int) -> CycleTree:
    """One request's verify: accept_row = accept_index[row] (flat positions, -1 padded)."""
    pos = [int(a) - row * draft_tokens for a in accept_row if int(a) >= 0][1:]  # drop the root
    idxs = [int(top_scores_index[p - 1]) for p in pos]
    info = [node_info(i, parent_list, topk) for i in idxs]
    ranks = [n.rank for n in info]
    in_tree = {int(i) for i in top_scores_index}
    n = len(ranks)
    lead = 0
    while lead < n and ranks[lead] == 0:
        lead += 1
    if lead < n:  # the target took a rank > 0 node: the chain's rank-0 guess was wrong there
        known = True
    else:  # path ended on rank-0 nodes: was the next rank-0 child verified (and rejected)?
        last = idxs[-1] if idxs else -1
        known = n < steps and _rank0_child(last, n, parent_list, topk) in in_tree
    chain = {}
    for s in range(1, steps + 1):
        chain[s] = (min(lead, s), known or lead >= s)
    agree: list[bool | None] = [r == 0 for r in ranks]  # root .. node n-1: the next node's rank
    if n == 0:
        agree.append(False)  # the root's rank-0 child is always in the tree (best level-1 score)
    else:
        agree.append(False if n < steps and _rank0_child(idxs[-1], n, parent_list, topk) in in_tree
                     else None)
    return CycleTree(n, ranks, chain, agree)


def _rank0_child(idx: int, depth: int, parent_list: Sequence[int], topk: int) -> int:
    """Score-list index of the rank-0 child of node ``idx`` at ``depth`` (-1: it was not expanded)."""
    if depth == 0:
        return 0
    base = topk + (depth - 1) * topk * topk
    for slot in range(topk):
        k = topk * (depth - 1) + 1 + slot
        if k < len(parent_list) and int(parent_list[k]) == idx:
            return base + slot * topk
    return -1


@dataclass
class TreeStats:
    """Sums over the cycles of one window (one configuration)."""
    steps: int
    topk: int
    draft_tokens: int
    cycles: int = 0  # request-verifies
    tokens: int = 0  # accepted drafts + bonus
    depth_hist: list[int] = field(default_factory=list)
    rank_hist: list[int] = field(default_factory=list)
    chain_tokens: dict[int, int] = field(default_factory=dict)
    chain_bound: dict[int, int] = field(default_factory=dict)  # cycles where it is a lower bound
    seq: list[bool | None] = field(default_factory=list)  # single-stream cycles' agreements

    def __post_init__(self) -> None:
        self.depth_hist = self.depth_hist or [0] * (self.steps + 1)
        self.rank_hist = self.rank_hist or [0] * self.topk
        for s in range(1, self.steps + 1):
            self.chain_tokens.setdefault(s, 0)
            self.chain_bound.setdefault(s, 0)

    def add(self, c: CycleTree, single: bool = False) -> None:
        """``single``: the verify had one request (its tokens continue the previous one's)."""
        if single:
            self.seq.extend(c.agree)
        self.cycles += 1
        self.tokens += c.depth + 1
        self.depth_hist[min(c.depth, self.steps)] += 1
        for r in c.ranks:
            if r < self.topk:
                self.rank_hist[r] += 1
        for s, (acc, exact) in c.chain.items():
            self.chain_tokens[s] += acc + 1
            self.chain_bound[s] += 0 if exact else 1

    def record(self) -> dict[str, Any]:
        """The window record's additive ``"tree"`` field."""
        n = self.cycles
        per_depth: list[float | None] = []
        for d in range(1, self.steps + 1):
            reached = sum(self.depth_hist[d - 1:])
            got = sum(self.depth_hist[d:])
            per_depth.append(round(got / reached, 4) if reached else None)
        rec = {
            "steps": self.steps, "topk": self.topk, "draft_tokens": self.draft_tokens,
            "cycles": n, "tokens": self.tokens,
            "accept_len": round(self.tokens / n, 4) if n else None,
            "depth_hist": list(self.depth_hist), "rank_hist": list(self.rank_hist),
            "per_depth": per_depth,
            "chain": {str(s): {"accept_len": round(self.chain_tokens[s] / n, 4) if n else None,
                               "lower_bound_cycles": self.chain_bound[s],
                               "exact": self.chain_bound[s] == 0}
                      for s in range(1, self.steps + 1)},
        }
        if self.seq:
            rec["chain_replay"] = {str(s): v for s, v in self.replay().items()}
        return rec

    def replay(self, fills: int = 64) -> dict[int, dict[str, Any]]:
        """The chain of s steps run over the single-stream tokens, (accepted + bonus) / verifies.
        ``accept_len_lower``: unknown agreements taken as rejections (a lower bound);
        ``accept_len_est``: unknowns filled at the rate of the known ones (mean of ``fills``
        seeded fills; estimated, flagged by ``unknown`` > 0)."""
        import random

        known = [a for a in self.seq if a is not None]
        rate = sum(known) / len(known) if known else 0.0
        rng = random.Random(24)
        out = {}
        for s in range(1, self.steps + 1):
            lo, verifies, unknown = _replay(self.seq, s)
            est = lo
            if unknown:
                vals = []
                for _ in range(fills):
                    filled = [a if a is not None else rng.random() < rate for a in self.seq]
                    vals.append(_replay(filled, s)[0])
                est = sum(vals) / len(vals)
            out[s] = {"accept_len_lower": round(lo, 4), "accept_len_est": round(est, 4),
                      "verifies": verifies, "unknown": unknown, "tokens": len(self.seq),
                      "known_rate": round(rate, 4)}
        return out


def _replay(seq: Sequence[bool | None], s: int) -> tuple[float, int, int]:
    pos = verifies = tokens = unknown = 0
    n = len(seq)
    while pos < n:
        run = 0
        while run < s and pos + run < n and seq[pos + run]:
            run += 1
        if run < s and pos + run < n and seq[pos + run] is None:
            unknown += 1
        verifies += 1
        tokens += run + 1
        pos += run + 1
    return (tokens / verifies if verifies else 0.0), verifies, unknown


def merge_replay(replays: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sum several single-stream windows' ``chain_replay`` fields: per step count, tokens over
    verifies (each window's verifies = its tokens / its accept length), so a window weighs by
    its tokens, as one long replay would."""
    out: dict[str, dict[str, Any]] = {}
    for s in sorted({k for r in replays if r for k in r}, key=int):
        parts = [r[s] for r in replays if r and s in r and r[s].get("tokens")]
        tok = sum(p["tokens"] for p in parts)
        if not tok:
            continue
        out[s] = {"accept_len_est": round(tok / sum(p["tokens"] / p["accept_len_est"] for p in parts), 4),
                  "accept_len_lower": round(tok / sum(p["tokens"] / p["accept_len_lower"] for p in parts), 4),
                  "unknown": sum(p["unknown"] for p in parts), "tokens": tok, "windows": len(parts)}
    return out


def merge(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Sum several windows' ``tree`` fields of one configuration."""
    recs = [r for r in records if r and r.get("cycles")]
    if not recs:
        return None
    first = recs[0]
    st = TreeStats(first["steps"], first["topk"], first["draft_tokens"])
    for r in recs:
        st.cycles += r["cycles"]
        st.tokens += r["tokens"]
        st.depth_hist = [a + b for a, b in zip(st.depth_hist, r["depth_hist"], strict=False)]
        st.rank_hist = [a + b for a, b in zip(st.rank_hist, r["rank_hist"], strict=False)]
        for s, c in r["chain"].items():
            si = int(s)
            if c["accept_len"] is not None:
                st.chain_tokens[si] += round(c["accept_len"] * r["cycles"])
            st.chain_bound[si] += c["lower_bound_cycles"]
    return st.record()


class AsyncCapture:
    """Copy a cycle's tree tensors to the host without a synchronisation; decode them later.

    ``capture`` is called where the tensors exist (after eagle_sample, with the verify input's
    tree); it issues ``tensor.to("cpu", non_blocking=True)`` (pinned destination in torch's
    caching host allocator) and records an event on the current stream. ``drain`` decodes every
    pending cycle whose event reports done (``event.query()``), oldest first, and never waits;
    ``drain(wait=True)`` (window end, off the hot path) synchronises on each event.
    ``torch_mod`` is the torch module (passed in so this module imports nothing).
    """

    def __init__(self, torch_mod: Any, steps: int, topk: int, draft_tokens: int,
                 max_pending: int = 64) -> None:
        self.torch = torch_mod
        self.stats = TreeStats(steps, topk, draft_tokens)
        self.pending: list[tuple[Any, Any, Any, Any]] = []
        self.max_pending = max_pending
        self.dropped = 0
        self.errors = 0  # cycles whose tensors did not decode

    def capture(self, accept_index: Any, top_scores_index: Any, parent_list: Any) -> None:
        if len(self.pending) >= self.max_pending:
            self.dropped += 1
            return
        host = [t.to("cpu", non_blocking=True) for t in (accept_index, top_scores_index, parent_list)]
        ev = self.torch.cuda.Event()
        ev.record()
        self.pending.append((ev, *host))

    def drain(self, wait: bool = False) -> int:
        done = 0
        st = self.stats
        while self.pending:
            ev, acc, tsi, par = self.pending[0]
            if wait:
                ev.synchronize()
            elif not ev.query():
                break
            self.pending.pop(0)  # first: a cycle that cannot be decoded must not block the rest
            try:
                acc_l, tsi_l, par_l = acc.tolist(), tsi.tolist(), par.tolist()
                for b, row in enumerate(acc_l):
                    st.add(decode_cycle(row, b, tsi_l[b], par_l[b] if par_l else [], st.topk,
                                        st.steps, st.draft_tokens), single=len(acc_l) == 1)
            except Exception:  # noqa: BLE001 - an unexpected layout: counted, never raised
                self.errors += 1
            done += 1
        return done


# ---------------------------------------------------------------- plugin hooks (SGLang >= 0.5.11)

# AROUND hooks on module-level functions, targeted where the worker LOOKS THEM UP, not where they
# are defined: in 0.5.16 / 0.5.19 / 0.5.23 speculative/eagle_worker_v2.py does
# ``from ...eagle_worker_common import build_eagle_verify_input`` and calls its own global (the
# tree: parent_list, top_scores_index, positional args 3 and 4), and eagle_worker_common.py does
# ``from ...eagle_utils import eagle_sample`` and calls it inside run_eagle_verify (accept_index is
# its 3rd result). HookRegistry's setattr lands on the module named in the target; a hook on the
# defining module reaches a by-value importer only through _propagate_patch (0.5.16+), and only for
# modules already imported at apply time. H200 run, 0.5.16: the tree field was empty. The targets
# are decided per release from the caller's source (``plan``): a layout that differs gets no tree
# hooks and one note, never a SGLang traceback.
# (caller module, name it from-imports and calls). multi_layer_eagle_worker_v2 (a separate
# multi-layer draft worker) also from-imports build_eagle_verify_input; it is not a target here
# (_propagate_patch rebinds its copy too when it is loaded, which the capture tolerates).
CALLERS = (("sglang.srt.speculative.eagle_worker_v2", "build_eagle_verify_input"),
           ("sglang.srt.speculative.eagle_worker_common", "eagle_sample"))
TARGETS = tuple(f"{mod}.{name}" for mod, name in CALLERS)


def caller_uses(source: str, name: str) -> bool:
    """The module from-imports ``name`` (unaliased) and calls it by that bare name."""
    import ast

    tree = ast.parse(source)
    imported = any(isinstance(n, ast.ImportFrom) and any(a.name == name and a.asname in (None, name)
                                                         for a in n.names)
                   for n in ast.walk(tree))
    called = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
                 for n in ast.walk(tree))
    return imported and called


def plan(package_dir: Any) -> tuple[list[str], str | None]:
    """The tree targets for this SGLang source tree (``sglang/`` folder) and, when there are
    none, why. Both or nothing: the capture needs the layout and the accept index of one cycle."""
    from pathlib import Path

    for mod, name in CALLERS:
        rel = Path(*mod.split(".")[1:]).with_suffix(".py")
        try:
            ok = caller_uses((Path(package_dir) / rel).read_text(encoding="utf-8"), name)
        except (OSError, SyntaxError, ValueError):
            ok = False
        if not ok:
            return [], (f"tree probes off: {mod} does not from-import and call {name} in this "
                        "SGLang (needs the 0.5.16+ layout); no tree field in the records")
    return list(TARGETS), None


def available(package_dir: Any) -> bool:
    """Both tree targets are from-imported and called by their caller modules in this tree."""
    return bool(plan(package_dir)[0])


def register_hooks(registry: Any, hook_type: Any, package_dir: Any = None,
                   note: Any = None) -> list[str]:
    """Register both AROUND hooks (the plugin calls this with the probes on) and return their
    targets; none, and ``note(why)``, when ``package_dir`` has another layout (before 0.5.16)."""
    targets = list(TARGETS)
    if package_dir is not None:
        targets, why = plan(package_dir)
        if why and note is not None:
            note(why)
    if not targets:
        return []
    registry.register(TARGETS[0], around_build_verify_input, hook_type.AROUND)
    registry.register(TARGETS[1], around_eagle_sample, hook_type.AROUND)
    return targets


class _State:
    layout: tuple[Any, Any] | None = None
    cap: AsyncCapture | None = None
    errors: int = 0


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else None)


def around_build_verify_input(original: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        _State.layout = (_arg(args, kwargs, 3, "top_scores_index"), _arg(args, kwargs, 2, "parent_list"))
    except Exception:  # noqa: BLE001 - never raise into SGLang
        _State.layout = None
    return original(*args, **kwargs)


def around_eagle_sample(original: Any, *args: Any, **kwargs: Any) -> Any:
    result = original(*args, **kwargs)
    try:
        lay, _State.layout = _State.layout, None
        vi = _arg(args, kwargs, 0, "verify_input")
        if lay is None or vi is None or lay[0] is None or lay[1] is None:
            return result
        accept_index = result[2]
        if accept_index.numel() == 0:
            return result
        steps, topk, dt = int(vi.spec_steps), int(vi.topk), int(vi.draft_token_num)
        cap = _State.cap
        if cap is None or (cap.stats.steps, cap.stats.topk, cap.stats.draft_tokens) != (steps, topk, dt):
            import torch

            cap = _State.cap = AsyncCapture(torch, steps, topk, dt)
        cap.drain()
        cap.capture(accept_index, lay[0], lay[1])
    except Exception:  # noqa: BLE001 - never raise into SGLang; counted in the record
        _State.errors += 1
    return result


def window_field() -> dict[str, Any] | None:
    """The window record's ``"tree"`` field: every cycle whose copy has landed (never waits),
    then a fresh sum for the next window. None when no tree cycle was captured."""
    cap = _State.cap
    if cap is None:
        return None
    try:
        cap.drain()
        rec = cap.stats.record()
        rec["pending"] = len(cap.pending)  # captured, copy not landed yet: next window's
        rec["dropped"] = cap.dropped
        rec["errors"] = _State.errors + cap.errors
        st = cap.stats
        cap.stats = TreeStats(st.steps, st.topk, st.draft_tokens)
        cap.dropped = 0
        return rec if rec["cycles"] else None
    except Exception:  # noqa: BLE001
        return None
