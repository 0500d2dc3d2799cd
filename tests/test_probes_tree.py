"""Tree-aware probes (probes/tree.py) from recorded tree cycles.

The cycles are recorded from real code: SGLang 0.5.16's own selection functions
(``_select_top_k_tokens_*``, ``organize_draft_results``, from the release source) build each tree
from the tree construction's draft scores (tiny/trees.py, pure Python: no model build), and the
accept_index rows are what greedy verify accepts there. Faked: only the GPU side of
``AsyncCapture`` (a tensor whose ``.to("cpu", non_blocking=True)`` hands back itself and a CUDA
event that reports done after a set number of queries), because there is no GPU here.
"""

from __future__ import annotations

import pytest

from sglang_eagle3_ext.runtime.probes import tree as ptree
from sglang_eagle3_ext.tiny import trees

torch = pytest.importorskip("torch")

from test_tiny_trees import _release_funcs, _sglang_tree  # noqa: E402


@pytest.fixture(scope="module")
def maps():
    return trees.tree_maps(0.7, [0.5, 0.3], 0, 1024)


def _record(maps, steps, topk, dt, cycles, bs=1):
    """Recorded cycles: (accept_index [bs, steps+1], top_scores_index [bs, D-1], parent_list)."""
    ns = _release_funcs()
    roots = [0 + 97 * b for b in range(bs)]
    out = []
    for _ in range(cycles):
        acc, tsi, par = [], [], []
        for b, root in enumerate(roots):
            idx, toks, parents = _sglang_tree(ns, maps, root, steps, topk, dt)
            nodes = trees.build_tree(maps, root, steps, topk, dt)
            path, bonus = trees.verify_tree(maps, root, nodes)
            pos = [idx.index(n.idx) + 1 for n in path]
            row = [b * dt] + [b * dt + p for p in pos]
            acc.append(row + [-1] * (steps + 1 - len(row)))
            tsi.append(idx)
            par.append(parents)
            roots[b] = bonus
        out.append((acc, tsi, par, list(roots)))
    return out


@pytest.mark.parametrize("cfg", [(3, 4, 13), (5, 8, 21), (3, 2, 7), (4, 1, 5)])
def test_probe_accept_len_equals_sglang_counter(maps, cfg):
    steps, topk, dt = cfg
    st = ptree.TreeStats(steps, topk, dt)
    rec = _record(maps, steps, topk, dt, 60, bs=2)
    tokens = 0
    for acc, tsi, par, _ in rec:
        for b, row in enumerate(acc):
            c = ptree.decode_cycle(row, b, tsi[b], par[b], topk, steps, dt)
            st.add(c)
            tokens += sum(1 for a in row if a >= 0)  # SGLang: accepted drafts + bonus per verify
    r = st.record()
    assert r["accept_len"] == pytest.approx(tokens / st.cycles, abs=1e-4)
    assert r["cycles"] == 120
    assert sum(r["rank_hist"]) == tokens - st.cycles


def test_ranks_equal_the_construction(maps):
    steps, topk, dt = 3, 4, 13
    rec = _record(maps, steps, topk, dt, 30)
    root = 0
    for acc, tsi, par, nxt in rec:
        path, _ = trees.verify_tree(maps, root, trees.build_tree(maps, root, steps, topk, dt))
        c = ptree.decode_cycle(acc[0], 0, tsi[0], par[0], topk, steps, dt)
        assert c.ranks == [n.rank for n in path] and c.depth == len(path)
        root = nxt[0]


def test_chain_from_tree_exact_cycles_equal_the_chain(maps):
    """Where the probe says exact, the chain of s' steps from the same root accepts exactly that."""
    steps, topk, dt = 5, 4, 21
    rec = _record(maps, steps, topk, dt, 120)
    roots = [0] + [r[3][0] for r in rec[:-1]]
    exact = bound = 0
    for (acc, tsi, par, _), root in zip(rec, roots, strict=True):
        c = ptree.decode_cycle(acc[0], 0, tsi[0], par[0], topk, steps, dt)
        for s in range(1, steps + 1):
            chain_nodes = trees.build_tree(maps, root, s, 1, s + 1)
            want = len(trees.verify_tree(maps, root, chain_nodes)[0])
            got, ok = c.chain[s]
            if ok:
                exact += 1
                assert got == want
            else:
                bound += 1
                assert got <= want
    assert exact > 10 * max(bound, 1) or bound == 0


def test_tree_derived_chain_close_to_chain_simulation(maps):
    """Averaged over a tree run, the derived 3-step chain is within 2 % of the chain itself."""
    steps, topk, dt = 3, 4, 13
    st = ptree.TreeStats(steps, topk, dt)
    for acc, tsi, par, _ in _record(maps, steps, topk, dt, 400):
        st.add(ptree.decode_cycle(acc[0], 0, tsi[0], par[0], topk, steps, dt))
    r = st.record()
    chain = trees.simulate_tree(maps, 3, 1, 4, cycles=4000).accept_len
    assert r["chain"]["3"]["accept_len"] == pytest.approx(chain, rel=0.03)
    assert r["per_depth"][0] is not None and 0 < r["per_depth"][0] <= 1


class FakeTensor:
    def __init__(self, rows):
        self.rows = rows
        self.copies = []

    def to(self, device, non_blocking=False):
        self.copies.append((device, non_blocking))
        return self

    def tolist(self):
        return self.rows


class FakeEvent:
    gpu_done = False  # the fake GPU: every recorded event completes when the test says so

    def __init__(self):
        self.synced = False

    def record(self):
        pass

    def query(self):
        return FakeEvent.gpu_done

    def synchronize(self):
        self.synced = True


class FakeTorch:
    class cuda:  # noqa: N801
        Event = FakeEvent


def test_async_capture_never_waits(maps):
    steps, topk, dt = 3, 4, 13
    cap = ptree.AsyncCapture(FakeTorch, steps, topk, dt)
    rec = _record(maps, steps, topk, dt, 3)
    ts = []
    for acc, tsi, par, _ in rec:
        t = [FakeTensor(acc), FakeTensor(tsi), FakeTensor(par)]
        ts.extend(t)
        cap.capture(*t)
    assert all(c == [("cpu", True)] for t in ts for c in [t.copies])
    FakeEvent.gpu_done = False
    assert cap.drain() == 0  # events not done yet: nothing read, nothing waited on
    FakeEvent.gpu_done = True
    assert cap.drain() == 3
    assert cap.stats.cycles == 3
    FakeEvent.gpu_done = False
    cap.capture(FakeTensor(rec[0][0]), FakeTensor(rec[0][1]), FakeTensor(rec[0][2]))
    assert cap.drain(wait=True) == 1 and cap.pending == [] and cap.stats.cycles == 4


def test_merge_windows(maps):
    steps, topk, dt = 3, 2, 7
    a, b = ptree.TreeStats(steps, topk, dt), ptree.TreeStats(steps, topk, dt)
    rec = _record(maps, steps, topk, dt, 20)
    for i, (acc, tsi, par, _) in enumerate(rec):
        (a if i % 2 else b).add(ptree.decode_cycle(acc[0], 0, tsi[0], par[0], topk, steps, dt))
    m = ptree.merge([a.record(), b.record(), {}])
    assert m["cycles"] == 20 and m["tokens"] == a.tokens + b.tokens
    assert ptree.merge([]) is None


def test_plugin_hooks_capture_and_window_field(maps):
    """The AROUND hooks with fake originals (no SGLang forward on CPU): build_eagle_verify_input's
    tree + eagle_sample's accept_index reach the window field; errors never raise."""
    from types import SimpleNamespace

    steps, topk, dt = 3, 4, 13
    rec = _record(maps, steps, topk, dt, 4)
    ptree._State.cap = ptree.AsyncCapture(FakeTorch, steps, topk, dt)
    ptree._State.errors = 0
    FakeEvent.gpu_done = True
    vi = SimpleNamespace(spec_steps=steps, topk=topk, draft_token_num=dt)

    class T(FakeTensor):
        def numel(self):
            return len(self.rows)

    for acc, tsi, par, _ in rec:
        ptree.around_build_verify_input(lambda *a, **k: "vi", "batch", "draft_input", T(par), T(tsi), "toks")
        out = ptree.around_eagle_sample(lambda *a, _acc=acc, **k: ("pred", "n", T(_acc)), vi, "batch", "logits")
        assert out[0] == "pred"
    ptree.around_eagle_sample(lambda *a, **k: ("pred", "n", None), vi)  # no layout: ignored
    ptree.around_build_verify_input(lambda *a, **k: None, 1, 2, 3, 4)
    ptree.around_eagle_sample(lambda *a, **k: ("p", "n", object()), vi)  # broken tensor: counted
    f = ptree.window_field()
    assert f["cycles"] == 4 and f["errors"] == 1 and f["pending"] == 0
    assert ptree.window_field() is None  # a fresh window after each read
    ptree._State.cap = None


def test_chain_replay_brackets_the_chain_on_the_same_tokens(maps):
    """One stream: greedy output is the same for chain and tree, so the tree run's agreements
    replay the chain server on the same tokens: the lower bound is below it, the estimate within
    3 % of it (unknown agreements filled at the known rate); without unknowns it is exact."""
    steps, topk, dt = 5, 4, 21
    st = ptree.TreeStats(steps, topk, dt)
    for acc, tsi, par, _ in _record(maps, steps, topk, dt, 80):
        st.add(ptree.decode_cycle(acc[0], 0, tsi[0], par[0], topk, steps, dt), single=True)
    n = len(st.seq)
    rep = st.replay()
    for s in (3, 5):
        x, tokens, verifies = 0, 0, 0
        while tokens < n:  # the chain server over the same tokens, from the same root
            path, x = trees.verify_tree(maps, x, trees.build_tree(maps, x, s, 1, s + 1))
            tokens += min(len(path) + 1, n - tokens)
            verifies += 1
        chain = n / verifies
        assert rep[s]["accept_len_lower"] <= chain + 1e-9
        assert rep[s]["accept_len_est"] == pytest.approx(chain, rel=0.03)
    exact = ptree._replay([True, True, False, True, False], 2)
    assert exact == (2.5, 2, 0)  # root 0: accept 1, 2 (capped), bonus 3; root 3: accept 4, bonus 5
    assert st.record()["chain_replay"]["3"]["tokens"] == n


def test_merge_replay_weighs_windows_by_their_tokens():
    """Windows merge as tokens over verifies: two windows of 10 and 30 tokens at 2.0 and 3.0
    give 40 / (5 + 10) = 2.667 (not the plain mean 2.5); step counts a window lacks are skipped,
    and windows without a replay (multi-stream) add nothing."""
    w1 = {"3": {"tokens": 10, "accept_len_est": 2.0, "accept_len_lower": 2.0, "unknown": 0}}
    w2 = {"3": {"tokens": 30, "accept_len_est": 3.0, "accept_len_lower": 2.5, "unknown": 4},
          "5": {"tokens": 30, "accept_len_est": 3.5, "accept_len_lower": 3.0, "unknown": 2}}
    m = ptree.merge_replay([w1, None, w2, {}])
    assert m["3"] == {"accept_len_est": 2.6667, "accept_len_lower": 2.3529, "unknown": 4, "tokens": 40,
                      "windows": 2}
    assert m["5"]["accept_len_est"] == 3.5 and m["5"]["windows"] == 1
    assert ptree.merge_replay([None, {}]) == {}


@pytest.mark.parametrize("version,want", [("0.5.13", False), ("0.5.16", True), ("0.5.19", True),
                                          ("0.5.23", True)])
def test_hook_targets_are_the_callers_from_imported_names(version, want):
    """Per pinned release (real sources, ast): each tree target is a name its caller module
    from-imports AND calls, so HookRegistry's setattr there is what the worker's call resolves;
    an older layout gets no hooks and one note."""
    import ast

    from sglang_eagle3_ext.serve import releases

    pkg = releases.fetch(version) / "sglang"
    targets, why = ptree.plan(pkg)
    assert (targets == list(ptree.TARGETS)) is want and (why is None) is want

    class Reg:
        got: list = []

        @classmethod
        def register(cls, target, fn, kind):
            cls.got.append(target)

    notes: list[str] = []
    kinds = type("K", (), {"AROUND": "around"})
    assert ptree.register_hooks(Reg, kinds, pkg, note=notes.append) == targets
    assert Reg.got == targets and len(notes) == (0 if want else 1)
    for target in targets:
        mod, name = target.rsplit(".", 1)
        tree = ast.parse((pkg.parent / (mod.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and any(a.name == name and a.asname is None for a in n.names)]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == name]
        assert froms and calls, target
        assert all(not (isinstance(n, ast.FunctionDef) and n.name == name) for n in tree.body)
    assert not ptree.caller_uses("from x import f\n", "f")  # imported, never called: not a target
    assert not ptree.caller_uses("import x\nx.f()\n", "f")  # looked up on x: x is the target


def test_undecodable_cycle_is_counted_not_blocking(maps):
    steps, topk, dt = 3, 4, 13
    cap = ptree.AsyncCapture(FakeTorch, steps, topk, dt)
    FakeEvent.gpu_done = True
    (acc, tsi, par, _), = _record(maps, steps, topk, dt, 1)
    cap.capture(FakeTensor([[0, 5, -1, -1]]), FakeTensor([[]]), FakeTensor([[]]))  # bad layout
    cap.capture(FakeTensor(acc), FakeTensor(tsi), FakeTensor(par))
    assert cap.drain() == 2 and cap.errors == 1 and cap.stats.cycles == 1


def test_topk1_chain_layout_of_the_v2_worker():
    """SGLang 0.5.16 EAGLEWorkerV2._rebuild_topk1_chain_buffers: parents arange(-1, steps-1),
    score indices arange(steps); a chain server's cycles decode through the same rule."""
    steps, dt = 3, 4
    tsi, par = list(range(steps)), list(range(-1, steps - 1))
    c = ptree.decode_cycle([0, 1, 2, -1], 0, tsi, par, 1, steps, dt)
    assert c.depth == 2 and c.ranks == [0, 0] and c.chain[3] == (2, True)
    assert c.agree == [True, True, False]
    c = ptree.decode_cycle([4, 5, 6, 7], 1, tsi, par, 1, steps, dt)  # row 1, all accepted
    assert c.depth == 3 and c.chain[3] == (3, True) and c.agree[-1] is None
