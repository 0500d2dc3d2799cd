"""The tree construction (`tiny --acceptance P --alternatives A1,A2,...`, docs/reference/tiny.md "Trees").

The target is the partial target of the same seed (next token f(last token), one random cycle on
the hot ids). The draft proposes, for every hot input x, K_DESIGN ranked candidates
c_0(x) .. c_7(x) (distinct cycle ids) with designed logits TOP - s(x) * GAP[r]: a fixed rank
profile scaled per token by s(x) in [S_LO, S_HI] (so two rank paths through different tokens
never tie in SGLang's cumulative scores), every other row far below. The target's token f(x) sits
at rank 0 for a P-fraction of the ids; of the others an A1-fraction has it at rank 1, of the rest
an A2-fraction at rank 2, ... (conditional fractions, exact counts); the rest never.

``simulate_tree_cycle`` replays SGLang's tree selection on those scores (0.5.16
speculative/spec_utils.py ``_select_top_k_tokens_first`` / ``_later``: level 1 = the root's top-k,
each later level expands the top-k of the k*k children of the previous level's selected nodes,
cumulative score = product of softmax probabilities; eagle_utils.py ``organize_draft_results``:
the tree is the root + the top (draft_tokens - 1) nodes of every level's scores) and greedy
verify (follow the child whose token is the target's next token).

Prompt regions (``--regions P1,P2,...``): the hot cycle is cut into arcs (in walk order), arc i
with rank-0 fraction Pi; tree builds use a chat template that ends with the user's last token, and
marker words (cold ids, not on the cycle) are sent to the start of each arc, so a chat prompt that
ends with arc i's word walks arc i: per-prompt accept lengths of different difficulty.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError
from .construct import cycle_len, partial_maps
from .shapes import TOKENIZER_VOCAB

K_DESIGN = 8  # designed candidates per input: topk up to 8 is predictable
TOP_LOGIT = 28.0  # bf16 spacing 0.125 in [16, 32): rounding far below the designed gaps
# rank profile: log-prob gap of rank r below rank 0 (scaled by s(x)); consecutive gaps >= 0.67,
# so bf16 (spacing 0.125 at these logits) never swaps two ranks
GAP = tuple(1.2 * math.log(r + 1) + 0.5 * r for r in range(K_DESIGN))
S_LO, S_HI = 0.75, 1.33  # per-token scale of the rank profile (log-uniform)
LOW_MARGIN = 12.0  # every non-candidate row at least this far below the lowest candidate
TREE_NORM_SCALE = 2.0 ** -12  # final-norm weight: the carried hidden moves logits by < 0.01
REGION_NAMES = ("easy", "medium", "hard", "harder", "hardest")
GRID_STEPS = (1, 2, 3, 4, 5)
GRID_TOPK = (1, 2, 4, 8)


def _probabilities(value: str | list | tuple | None, flag: str, what: str) -> list[float]:
    """A comma list (or sequence) of probabilities in [0, 1]; UserError(2) naming ``flag``."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = []
    for it in items:
        try:
            x = float(it)
        except (TypeError, ValueError):
            raise UserError(f"{flag} takes {what}, got {it!r}", exit_code=2) from None
        if not 0.0 <= x <= 1.0 or x != x:
            raise UserError(f"{flag} probability must be in [0, 1], got {it!r}", exit_code=2)
        out.append(x)
    return out


def parse_alternatives(value: str | list | tuple | None) -> list[float]:
    out = _probabilities(value, "--alternatives", "probabilities")
    if len(out) > K_DESIGN - 1:
        raise UserError(f"--alternatives: at most {K_DESIGN - 1} values (ranks 1..{K_DESIGN - 1})",
                        exit_code=2)
    return out


def parse_regions(value: str | list | tuple | None) -> list[float]:
    out = _probabilities(value, "--regions", "rank-0 probabilities")
    if out and not 2 <= len(out) <= len(REGION_NAMES):
        raise UserError(f"--regions takes 2 to {len(REGION_NAMES)} values, got {len(out)}",
                        exit_code=2)
    return out


@dataclass
class TreeMaps:
    f: list[int]  # target's next token, every tokenizer id
    cands: list[list[int]]  # hot id -> K_DESIGN candidates, rank order
    rank: list[int]  # hot id -> rank of f(x) among its candidates, -1 when none
    logits: list[list[float]]  # hot id -> designed (or realized) candidate logits
    order: list[int]  # the hot cycle in walk order
    regions: list[dict[str, Any]] = field(default_factory=list)
    tree_cache: dict[tuple[int, int, int], dict[int, list[Any]]] = field(default_factory=dict, repr=False)

    def logprobs(self, x: int) -> list[float]:
        lp = self.tree_cache.setdefault((0, 0, 0), {})  # per-token log-probs, with the trees
        if x not in lp:
            lg = self.logits[x]
            m = max(lg)
            z = m + math.log(sum(math.exp(v - m) for v in lg))
            lp[x] = [v - z for v in lg]
        return lp[x]

    def to_dict(self) -> dict[str, Any]:
        return {"cands": self.cands, "rank": self.rank,
                "logits": [[round(v, 4) for v in r] for r in self.logits], "regions": self.regions}


def _assign_ranks(ids: list[int], p: float, alts: list[float], rng: random.Random) -> dict[int, int]:
    """Exact counts: round(p n) ids at rank 0, of the rest round(a1 rest) at rank 1, ..."""
    ids = list(ids)
    rng.shuffle(ids)
    out: dict[int, int] = {}
    rest = ids
    for r, frac in enumerate([p, *alts]):
        k = round(frac * len(rest))
        for x in rest[:k]:
            out[x] = r
        rest = rest[k:]
    for x in rest:
        out[x] = -1
    return out


def tree_maps(p: float, alternatives: list[float], seed: int, draft_vocab: int,
              regions: list[float] | None = None, markers: list[int] | None = None) -> TreeMaps:
    """f (the partial target of this seed), candidates, ranks and designed logits.

    With ``regions`` the hot cycle (walk order) is cut into len(regions) arcs, arc i with rank-0
    fraction regions[i] (``p`` is then unused for ranks); ``markers`` (cold ids) get f = arc start.
    """
    f, _, _ = partial_maps(p, seed, draft_vocab)
    n = cycle_len(draft_vocab)
    order = [0] * n
    x = 0
    for i in range(n):  # walk order starting at id 0
        order[i] = x
        x = f[x]
    rng = random.Random(seed * 15485863 + 101)
    rank: dict[int, int] = {}
    reg_info: list[dict[str, Any]] = []
    if regions:
        arcs = len(regions)
        bounds = [round(i * n / arcs) for i in range(arcs + 1)]
        for i, pr in enumerate(regions):
            arc = order[bounds[i]:bounds[i + 1]]
            rank.update(_assign_ranks(arc, pr, alternatives, rng))
            info = {"name": REGION_NAMES[i], "p": pr, "start": arc[0], "length": len(arc)}
            if markers:
                if len(markers) < arcs:
                    raise UserError("tiny: not enough marker words for the regions")
                f = list(f)
                f[markers[i]] = arc[0]
                info["marker_token"] = markers[i]
            reg_info.append(info)
    else:
        rank = _assign_ranks(list(range(n)), p, alternatives, rng)
    cands: list[list[int]] = []
    logits: list[list[float]] = []
    ranks: list[int] = []
    for x in range(n):
        r = rank[x]
        others = rng.sample([y for y in range(n) if y != f[x]] if n <= 64 else _sample_ids(rng, n, f[x]),
                            K_DESIGN)
        c = others[:K_DESIGN]
        if r >= 0:
            c[r] = f[x]
        s = math.exp(rng.uniform(math.log(S_LO), math.log(S_HI)))
        cands.append(c)
        ranks.append(r)
        logits.append([TOP_LOGIT - s * g for g in GAP])
    return TreeMaps(f=f, cands=cands, rank=ranks, logits=logits, order=order, regions=reg_info)


def _sample_ids(rng: random.Random, n: int, avoid: int) -> list[int]:
    out: list[int] = []
    seen = {avoid}
    while len(out) < K_DESIGN:
        y = rng.randrange(n)
        if y not in seen:
            seen.add(y)
            out.append(y)
    return out


# ---------------------------------------------------------------- SGLang's tree selection + verify

@dataclass
class Node:
    idx: int  # index in SGLang's score list (level 1: rank; level d: k + (d-2) k^2 + slot k + rank)
    token: int
    depth: int  # 1..steps
    rank: int  # rank among its parent's candidates
    parent: int  # score-list index of the parent, -1 = root
    logscore: float


def build_tree(m: TreeMaps, root: int, steps: int, topk: int, draft_tokens: int) -> list[Node]:
    """The nodes SGLang verifies after root token ``root`` (the root itself excluded), in score
    list order (= SGLang's sorted top_scores_index). Mirrors 0.5.16 (see the module docstring)."""
    lp = m.logprobs(root)
    scored = [Node(r, m.cands[root][r], 1, r, -1, lp[r]) for r in range(topk)]
    selected = list(range(topk))  # level 1: every top-k node is expanded
    for depth in range(2, steps + 1):
        base = len(scored)
        for slot, s in enumerate(selected):
            par = scored[s]
            lpp = m.logprobs(par.token)
            for r in range(topk):
                scored.append(Node(base + slot * topk + r, m.cands[par.token][r], depth, r, s,
                                   par.logscore + lpp[r]))
        level = range(base, len(scored))
        # top-k of the k*k children by cumulative score (ties: lower index first)
        selected = heapq.nsmallest(topk, level, key=lambda i: (-scored[i].logscore, i))
    best = heapq.nsmallest(draft_tokens - 1, range(len(scored)), key=lambda i: (-scored[i].logscore, i))
    return [scored[i] for i in sorted(best)]


def verify_tree(m: TreeMaps, root: int, nodes: list[Node]) -> tuple[list[Node], int]:
    """Greedy verify: the accepted nodes (depth order) and the bonus token (the next root)."""
    children: dict[int, list[Node]] = {}
    for n in nodes:
        children.setdefault(n.parent, []).append(n)
    path: list[Node] = []
    key, want = -1, m.f[root]
    while True:
        nxt = next((c for c in children.get(key, ()) if c.token == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        key, want = nxt.idx, m.f[nxt.token]


def check_config(steps: int, topk: int, draft_tokens: int) -> None:
    if steps < 1 or topk < 1 or draft_tokens < 2:
        raise UserError("tree: steps >= 1, topk >= 1, draft tokens >= 2", exit_code=2)
    if topk > K_DESIGN:
        raise UserError(f"tree: topk {topk} > {K_DESIGN} designed candidates (not predictable)",
                        exit_code=2)
    most = topk + (steps - 1) * topk * topk
    if draft_tokens - 1 > most:
        raise UserError(f"tree: {draft_tokens} draft tokens > 1 + {most} nodes of "
                        f"(steps {steps}, topk {topk})", exit_code=2)
    if topk == 1 and draft_tokens != steps + 1:
        raise UserError("tree: topk 1 needs draft tokens = steps + 1 (SGLang's chain)", exit_code=2)


@dataclass
class TreeSim:
    accept_len: float  # (accepted drafts + bonus) per verify = SGLang's counter
    per_depth: list[float]  # P(accepted depth >= d | >= d-1), d = 1..steps
    rank_hist: list[int]  # accepted nodes by sibling rank
    verifies: int
    hist: list[int]  # verifies by accepted drafts
    chain_cut: list[float] = field(default_factory=list)  # s = 1..steps: the probes' derived chain


def _run(m: TreeMaps, start: int, steps: int, topk: int, draft_tokens: int, *, cycles: int = 0,
         max_tokens: int = 0) -> TreeSim:
    """``cycles`` verifies from root ``start`` (cycle average), or one request of ``max_tokens``
    whose prefill emitted ``start`` (counted as SGLang does: completion tokens / verifies)."""
    x, done, verifies, total = start, 1, 0, 0
    reached, accepted = [0] * steps, [0] * steps
    ranks = [0] * topk
    hist = [0] * (steps + 1)
    cache = m.tree_cache.setdefault((steps, topk, draft_tokens), {})
    cut = [0] * steps
    while (verifies < cycles) if cycles else (done < max_tokens):
        nodes = cache.get(x)
        if nodes is None:
            nodes = cache[x] = build_tree(m, x, steps, topk, draft_tokens)
        path, bonus = verify_tree(m, x, nodes)
        n = len(path)
        for d in range(min(n + 1, steps)):
            reached[d] += 1
        for d in range(n):
            accepted[d] += 1
        for node in path:
            ranks[node.rank] += 1
        lead = 0
        while lead < n and path[lead].rank == 0:
            lead += 1
        for s in range(steps):
            cut[s] += min(lead, s + 1) + 1
        hist[n] += 1
        verifies += 1
        total += n + 1
        done += n + 1
        x = bonus
    rates = [a / r if r else 0.0 for a, r in zip(accepted, reached, strict=True)]
    alen = total / verifies if cycles else max_tokens / verifies
    return TreeSim(alen, rates, ranks, verifies, hist, [c / verifies for c in cut])


def simulate_tree(m: TreeMaps, steps: int, topk: int, draft_tokens: int, cycles: int = 4000,
                  start: int = 0) -> TreeSim:
    """The cycle average (many prompts): ``cycles`` verifies along the walk."""
    return _run(m, start, steps, topk, draft_tokens, cycles=cycles)


def simulate_tree_request(m: TreeMaps, steps: int, topk: int, draft_tokens: int,
                          last_prompt_token: int, max_tokens: int) -> TreeSim:
    """One greedy request whose prompt ends with ``last_prompt_token`` (see simulate_request)."""
    return _run(m, m.f[last_prompt_token], steps, topk, draft_tokens, max_tokens=max_tokens)


def default_budgets(steps: int, topk: int) -> list[int]:
    """Draft-token budgets tiny.json lists per (steps, topk): the chain; 2 and 4 nodes per level;
    steps x topk + 1 (the largest SGLang's bench_speculative runs)."""
    if topk == 1:
        return [steps + 1]
    most = 1 + min(topk + (steps - 1) * topk * topk, steps * topk)
    return sorted({min(most, 1 + 2 * steps), min(most, 1 + 4 * steps), most})


def key(steps: int, topk: int, draft_tokens: int) -> str:
    return f"s{steps}.k{topk}.d{draft_tokens}"


def tree_info(m: TreeMaps, chat_last: int | None, request_tokens: tuple[int, ...] = (256,),
              prompts: dict[str, int] | None = None) -> dict[str, Any]:
    """tiny.json fields of a tree draft: the expectation per (steps, topk, draft tokens)."""
    n = len(m.rank)
    counts = [sum(1 for r in m.rank if r == k) for k in range(K_DESIGN)]
    info: dict[str, Any] = {
        "rank_fraction": [round(c / n, 4) for c in counts],
        "never_fraction": round(sum(1 for r in m.rank if r < 0) / n, 4),
        "gap": [round(g, 4) for g in GAP], "top_logit": TOP_LOGIT, "scale": [S_LO, S_HI],
        "expected_accept_len": {}, "per_depth": {}, "rank_hist": {}}
    if chat_last is not None:
        info["chat_last_token"] = chat_last
        info["expected_accept_len_chat"] = {str(t): {} for t in request_tokens}
        # what probes/tree.py's chain[s] reads on that request (the chain on the tree's verifies)
        info["expected_chain_from_tree_chat"] = {str(t): {} for t in request_tokens}
    if prompts:
        info["expected_accept_len_prompt"] = {name: {} for name in prompts}
    for steps in GRID_STEPS:
        for topk in GRID_TOPK:
            for dt in default_budgets(steps, topk):
                k = key(steps, topk, dt)
                sim = simulate_tree(m, steps, topk, dt)
                info["expected_accept_len"][k] = round(sim.accept_len, 4)
                info["per_depth"][k] = [round(r, 4) for r in sim.per_depth]
                info["rank_hist"][k] = sim.rank_hist
                if chat_last is not None:
                    for t in request_tokens:
                        r = simulate_tree_request(m, steps, topk, dt, chat_last, t)
                        info["expected_accept_len_chat"][str(t)][k] = round(r.accept_len, 4)
                        if topk > 1:
                            info["expected_chain_from_tree_chat"][str(t)][k] = [
                                round(v, 4) for v in r.chain_cut]
                for name, last in (prompts or {}).items():
                    r = simulate_tree_request(m, steps, topk, dt, last, request_tokens[0])
                    info["expected_accept_len_prompt"][name][k] = round(r.accept_len, 4)
    return info


def expectation(info: dict[str, Any], m: TreeMaps | None, steps: int, topk: int,
                draft_tokens: int) -> float:
    """Cycle-average expectation of any configuration (computed when not in the grid)."""
    k = key(steps, topk, draft_tokens)
    if k in info.get("expected_accept_len", {}):
        return float(info["expected_accept_len"][k])
    if m is None:
        raise UserError(f"tree: {k} is not in tiny.json's grid (pass the maps)", exit_code=2)
    check_config(steps, topk, draft_tokens)
    return simulate_tree(m, steps, topk, draft_tokens).accept_len


def maps_from_dict(f: list[int], d: dict[str, Any], n: int) -> TreeMaps:
    order = [0] * n
    x = 0
    for i in range(n):
        order[i] = x
        x = f[x]
    return TreeMaps(f=f, cands=d["cands"], rank=d["rank"], logits=d["logits"], order=order,
                    regions=d.get("regions", []))


__all__ = ["K_DESIGN", "TOKENIZER_VOCAB", "TreeMaps", "tree_maps", "build_tree", "verify_tree",
           "simulate_tree", "simulate_tree_request", "tree_info", "check_config"]


# ---------------------------------------------------------------- the draft's readout (torch)

def multi_readout(inputs: Any, m: TreeMaps, rows: int, iters: int = 400) -> tuple[Any, list[list[float]]]:
    """W [rows, d] with inputs[x] @ W.T = m.logits[x] on the K_DESIGN candidate rows of every hot
    input x (exact in fp32 up to the solve), and every other row at least LOW_MARGIN below the
    lowest candidate. Per row the candidate equalities are kept by an exact affine projection;
    a hinge step pushes violating non-candidates down. Returns W and the candidate logits as the
    bf16 product gives them (what the simulator uses: ``m.logits`` is updated in place)."""
    import torch

    dev = inputs.device
    x = inputs.float()
    n = len(m.cands)
    cand = torch.tensor(m.cands, device=dev)
    tgt = torch.tensor(m.logits, device=dev)
    low = float(tgt.min()) - LOW_MARGIN
    lists: list[list[tuple[int, float]]] = [[] for _ in range(rows)]
    for i in range(n):
        for r in range(K_DESIGN):
            lists[m.cands[i][r]].append((i, m.logits[i][r]))
    kmax = max(1, max(len(v) for v in lists))
    pidx = torch.zeros(rows, kmax, dtype=torch.long, device=dev)
    pmask = torch.zeros(rows, kmax, device=dev)
    ptgt = torch.zeros(rows, kmax, device=dev)
    for j, v in enumerate(lists):
        for k, (i, t) in enumerate(v):
            pidx[j, k], pmask[j, k], ptgt[j, k] = i, 1.0, t
    a = x[pidx] * pmask[..., None]
    ginv = torch.linalg.inv(a @ a.transpose(1, 2) + torch.diag_embed(1.0 - pmask))

    def project(w: Any) -> Any:
        res = (ptgt - (a @ w[:, :, None]).squeeze(-1)) * pmask
        return w + (a.transpose(1, 2) @ (ginv @ res[:, :, None])).squeeze(-1)

    is_cand = torch.zeros(n, rows, dtype=torch.bool, device=dev)
    is_cand.scatter_(1, cand, True)
    w = project(torch.zeros(rows, x.shape[1], device=dev))
    step = 0.5 / x.shape[1]
    for _ in range(iters):
        lg = x @ w.T
        over = torch.relu(lg - (low - 1.0)).masked_fill(is_cand, 0.0)
        if float((x @ w.T).masked_fill(is_cand, -1e9).max()) < low:
            break
        w = project(w - step * (over.T @ x))
    lg = (x.bfloat16() @ w.bfloat16().T).float()
    other = float(lg.masked_fill(is_cand, -1e9).max())
    got = lg.gather(1, cand)
    # accepted: every other row >= LOW_MARGIN / 2 below the lowest candidate (its probability
    # mass next to rank 0's is then < 2e-3 even over 2048 rows)
    if other > float(got.min()) - LOW_MARGIN / 2 or bool((got[:, 1:] >= got[:, :-1]).any()):
        raise UserError("tiny: could not build the tree draft's readout (try another --seed)")
    realized = [[round(float(v), 4) for v in row] for row in got.cpu()]
    m.logits = realized
    m.tree_cache.clear()  # trees depend on the scores
    return w, realized


def make_tree_draft(s: Any, dw: dict[str, Any], embed_tok: Any, code_dims: list[int],
                    m: TreeMaps, g_map: list[int]) -> None:
    """The partial draft (attention copies the current token's code) with the tree readout and a
    tiny final-norm weight, so the hidden carried to the next draft step cannot move the fine
    logit gaps (docs/reference/tiny.md, "Trees")."""
    import torch

    from . import draft as dr

    dr.make_partial(s, dw, embed_tok, code_dims, g_map)  # attention, values; readout replaced
    dev = embed_tok.device
    kv = s.d_kv_heads * s.d_head_dim
    n = len(m.cands)
    reach = torch.zeros(n, s.hidden, device=dev)
    reach[:, :kv] = embed_tok[:n, :kv].float()
    from .construct import rms_normed

    rows = min(s.draft_vocab, TOKENIZER_VOCAB)
    w, _ = multi_readout(rms_normed(reach, s.rms_eps), m, rows)
    dw["norm.weight"] = torch.full((s.hidden,), TREE_NORM_SCALE, device=dev)
    head = torch.zeros(s.draft_vocab, s.hidden, device=dev)
    head[:rows] = w / TREE_NORM_SCALE
    dw["lm_head.weight"] = head


# ---------------------------------------------------------------- per-prompt expectations

def load_maps(root: Any) -> TreeMaps:
    import json
    from pathlib import Path

    m = json.loads((Path(root) / "maps.json").read_text())
    if "tree" not in m:
        raise UserError(f"{root}: not a tree build (tiny --alternatives / --regions)", exit_code=2)
    return maps_from_dict(m["f"], m["tree"], len(m["tree"]["rank"]))


def prompt_last_token(root: Any, messages: list[dict[str, str]]) -> int:
    """Last id of the chat prompt SGLang builds for ``messages`` with the target's template."""
    from pathlib import Path

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(Path(root) / "target"))
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return int(ids[-1])


def expect_prompts(root: Any, prompts: list[Any], configs: list[tuple[int, int, int]],
                   max_tokens: int = 256) -> list[dict[str, Any]]:
    """Per prompt (a string or chat messages): its last token and, per configuration, the accept
    length one greedy chat request of ``max_tokens`` measures (simulate_tree_request)."""
    m = load_maps(root)
    rows = []
    for p in prompts:
        msgs = [{"role": "user", "content": p}] if isinstance(p, str) else p
        last = prompt_last_token(root, msgs)
        row: dict[str, Any] = {"last_token": last, "expected": {}}
        for st, k, d in configs:
            check_config(st, k, d)
            row["expected"][key(st, k, d)] = round(
                simulate_tree_request(m, st, k, d, last, max_tokens).accept_len, 4)
        rows.append(row)
    return rows
