"""The tree construction (tiny --alternatives / --regions; docs/reference/tiny.md "Trees").

Real code throughout, nothing faked: the selection mirror is checked against SGLang 0.5.16's own
``_select_top_k_tokens_first`` / ``_select_top_k_tokens_later`` / ``organize_draft_results``
(their source, compiled here without the torch.compile decorator, on the draft scores the build
wrote); the target with the real transformers forward; the draft with the plain-torch EAGLE-3
emulator of tests/test_tiny.py (SGLang itself needs a GPU for a tree draft).
"""

from __future__ import annotations

import ast
import json
import math
import random
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli, tiny
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import releases
from sglang_eagle3_ext.tiny import trees

torch = pytest.importorskip("torch")

from test_tiny import DraftEmulator, _hf_greedy_next  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tiny.TinyModels:
    return tiny.build(tmp_path_factory.mktemp("tree"), 0.7, alternatives="0.5,0.3",
                      regions="0.9,0.6,0.3")


@pytest.fixture(scope="module")
def maps(built) -> trees.TreeMaps:
    return trees.load_maps(built.root)


def _release_funcs() -> dict:
    """SGLang 0.5.16's selection functions from the release source (decorators dropped)."""
    root = releases.fetch("0.5.16") / "sglang" / "srt"
    ns: dict = {"torch": torch, "Optional": None, "List": list,
                "maybe_detect_oob": lambda *a, **k: None}
    want = {"spec_utils.py": ["_select_top_k_tokens_first", "_select_top_k_tokens_later"],
            "eagle_utils.py": ["organize_draft_results"]}
    for fname, names in want.items():
        tree = ast.parse((root / "speculative" / fname).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                node.decorator_list = []
                exec(compile(ast.Module([node], []), fname, "exec"), ns)  # noqa: S102
    common = ast.parse((root / "utils" / "common.py").read_text())
    for node in common.body:
        if isinstance(node, ast.FunctionDef) and node.name == "fast_topk":
            exec(compile(ast.Module([node], []), "common.py", "exec"), ns)  # noqa: S102
    return ns


def _sglang_tree(ns: dict, m: trees.TreeMaps, root: int, steps: int, topk: int, dt: int):
    """Run the release's draft-side selection with our draft's softmax probabilities."""
    def probs(tokens):
        out = torch.zeros(len(tokens), len(m.cands))
        for i, t in enumerate(tokens):
            for r, lp in enumerate(m.logprobs(t)):
                out[i, m.cands[t][r]] = math.exp(lp)
        return out

    topk_p, topk_index = ns["fast_topk"](probs([root]), topk, -1)
    scores, hidden = None, None
    score_list, token_list, parents_list = [], [], []
    for i in range(steps):
        input_ids, hidden, scores, info = (
            ns["_select_top_k_tokens_first"](topk_p, topk_index, hidden, topk) if i == 0 else
            ns["_select_top_k_tokens_later"](i, topk_p, topk_index, hidden, scores, topk))
        score_list.append(info[0])
        token_list.append(info[1])
        parents_list.append(info[2])
        if i == steps - 1:
            break
        topk_p, topk_index = ns["fast_topk"](probs(input_ids.tolist()), topk, -1)
    parent_list, idx, tokens = ns["organize_draft_results"](score_list, token_list, parents_list, dt)
    return idx[0].tolist(), tokens[0].tolist(), parent_list[0].tolist()


@pytest.mark.parametrize("cfg", [(3, 2, 7), (3, 4, 8), (3, 4, 13), (4, 8, 20), (5, 4, 21), (2, 8, 9)])
def test_selection_equals_sglang_release_code(maps, cfg):
    ns = _release_funcs()
    rng = random.Random(3)
    for root in rng.sample(range(len(maps.cands)), 6):
        nodes = trees.build_tree(maps, root, *cfg)
        idx, toks, _ = _sglang_tree(ns, maps, root, *cfg)
        assert [n.idx for n in nodes] == idx
        assert [n.token for n in nodes] == toks


def test_chain_equals_the_chain_simulator(built, maps):
    g = [c[0] for c in maps.cands] + [0] * 1024
    for steps in (1, 3, 5):
        want, _ = tiny.construct.simulate_accept(maps.f, g, steps)
        assert trees.simulate_tree(maps, steps, 1, steps + 1).accept_len == pytest.approx(want)
        assert built.info["expected_accept_len"][str(steps)] == pytest.approx(want, abs=1e-3)


def test_rank_fractions_and_tree_gains(built):
    t = built.info["tree"]
    # regions 0.9 / 0.6 / 0.3 at rank 0, then 0.5 and 0.3 of the rest: exact counts
    assert t["rank_fraction"][0] == pytest.approx(0.6, abs=0.005)
    assert t["rank_fraction"][1] == pytest.approx(0.2, abs=0.005)
    assert t["rank_fraction"][2] == pytest.approx(0.06, abs=0.005)
    e = t["expected_accept_len"]
    assert e["s3.k1.d4"] < e["s3.k2.d7"] < e["s3.k4.d13"]  # alternatives pay at equal steps
    # a wider tree with the same budget never reaches more than the ranks that can be right
    assert sum(t["rank_hist"]["s5.k8.d21"][3:]) == 0


def test_per_prompt_regions_differ_as_designed(built):
    t = built.info["tree"]
    per = t["expected_accept_len_prompt"]
    easy, medium, hard = (per[w]["s3.k1.d4"] for w in t["markers"])
    assert easy > medium + 0.5 > hard + 1.0
    rows = trees.expect_prompts(built.root, [p["messages"] for p in map(
        json.loads, (REPO / "examples" / "prompts-trees.jsonl").read_text().splitlines())],
        [(3, 1, 4)])
    got = [r["expected"]["s3.k1.d4"] for r in rows]
    assert got == [easy, easy, medium, medium, hard, hard]


def test_target_follows_f_including_markers(built, maps):
    rng = random.Random(5)
    markers = [r["marker_token"] for r in maps.regions]
    ctx = [[rng.randrange(2040) for _ in range(16)] + [x] for x in [*markers, *rng.sample(range(2040), 13)]]
    assert _hf_greedy_next(built.target, ctx) == [maps.f[c[-1]] for c in ctx]
    for r in maps.regions:
        assert maps.f[r["marker_token"]] == r["start"]


def test_draft_ranks_and_scores_survive_chained_steps(built, maps):
    """Extend then 3 chained steps down random rank paths: at every step the emulated draft's
    top-8 are the designed candidates in rank order, log-probs within 0.1 of maps.json (bf16
    weights in an fp32 forward vs the build's bf16 product)."""
    rng = random.Random(7)
    for trial in range(3):
        emu = DraftEmulator(built.draft)
        prompt = [rng.randrange(2040) for _ in range(rng.randint(3, 12))]
        x = maps.f[prompt[-1]]
        aux = torch.randn(3 * tiny.HIDDEN)
        for pos, tok in enumerate(prompt[1:] + [x]):
            _, aux = emu.step(tok, aux, pos)
        tok, pos = x, len(prompt)
        for _ in range(4):
            lg = emu.last_logits
            top = torch.topk(lg, 8).indices.tolist()
            assert top == maps.cands[tok], f"trial {trial}"
            lp = torch.log_softmax(lg, -1)[top].tolist()
            assert max(abs(a - b) for a, b in zip(lp, maps.logprobs(tok), strict=True)) < 0.1
            tok = maps.cands[tok][rng.randrange(8)]
            _, aux = emu.step(tok, aux, pos)
            pos += 1


def test_reduced_llama3_8b_tree_build(tmp_path):
    m = tiny.build(tmp_path, 0.7, alternatives="0.5", shape=tiny.get_shape(
        "llama3-8b", layers=4, hidden=256, heads=4, kv_heads=4, head_dim=64, intermediate=256,
        vocab=4096, draft_vocab=1024))
    mp = trees.load_maps(m.root)
    rng = random.Random(1)
    ctx = [[rng.randrange(2040) for _ in range(12)] for _ in range(8)]
    assert _hf_greedy_next(m.target, ctx) == [mp.f[c[-1]] for c in ctx]
    emu = DraftEmulator(m.draft)
    x = mp.f[ctx[0][-1]]
    emu.step(x, torch.zeros(3 * 256), 0)
    assert torch.topk(emu.last_logits, 8).indices.tolist() == mp.cands[x]
    assert "s3.k4.d13" in m.info["tree"]["expected_accept_len"]


@pytest.mark.parametrize("args", [
    ["--acceptance", "0.7", "--alternatives", "x"],
    ["--acceptance", "0.7", "--alternatives", "1.5"],
    ["--acceptance", "oracle", "--alternatives", "0.5"],
    ["--acceptance", "0.6,0.8", "--alternatives", "0.5"],
    ["--acceptance", "0.7", "--regions", "0.9"],
    ["--acceptance", "0.7", "--alternatives", "0.5", "--tree", "3,16,9"],
    ["--acceptance", "0.7", "--alternatives", "0.5", "--tree", "3,2,40"],
])
def test_bad_tree_flags_exit_2(tmp_path, capsys, args):
    rc = cli.main(["tiny", "--out", str(tmp_path / "o"), *args])
    assert rc == 2
    assert not (tmp_path / "o").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_check_config():
    trees.check_config(3, 4, 13)
    with pytest.raises(UserError):
        trees.check_config(3, 1, 7)
