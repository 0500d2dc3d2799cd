"""Chain builds whose prompts walk different paths (tiny --paths; docs/reference/tiny.md).

Real code throughout: the built tokenizer's own chat template, the real transformers forward of
the built target, the construction's maps from maps.json. No GPU needed.
"""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_ext import cli, tiny
from sglang_eagle3_ext.tiny import construct, paths

torch = pytest.importorskip("torch")

from test_tiny import _hf_greedy_next  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tiny.TinyModels:
    return tiny.build(tmp_path_factory.mktemp("paths"), 0.8, paths=12, device="cpu")


def test_each_prompt_starts_its_own_walk(built):
    """The template ends every prompt with the user's last word; the target's first token is
    f(word), a different cycle point per prompt, as the file says."""
    from transformers import AutoTokenizer

    rows = [json.loads(x) for x in (built.root / paths.PROMPTS_FILE).read_text().splitlines()]
    assert len(rows) == 12 and len({r["start"] for r in rows}) == 12
    tok = AutoTokenizer.from_pretrained(str(built.target))
    ids = [tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True) for r in rows]
    ids = [list(x) if isinstance(x, list) else list(x["input_ids"]) for x in ids]
    assert [x[-1] for x in ids] == [r["last_token"] for r in rows]
    n = min(len(x) for x in ids)
    assert _hf_greedy_next(built.target, [x[-n:] for x in ids]) == [r["start"] for r in rows]


def test_pooled_expectation_is_tokens_over_verifies(built):
    """tiny.json paths: one request per prompt, all tokens / all verifies (SGLang's counter), the
    per-prompt values (in the prompts file) spread around it."""
    info = json.loads((built.root / "tiny.json").read_text())["paths"]
    maps = json.loads((built.root / "maps.json").read_text())
    rows = [json.loads(x) for x in (built.root / paths.PROMPTS_FILE).read_text().splitlines()]
    for s in (3, 5):
        ver = sum(sum(construct.simulate_request(maps["f"], maps["g"], s, r["last_token"], 256)[2]) for r in rows)
        assert info["expected_accept_len"]["256"][str(s)] == pytest.approx(256 * len(rows) / ver, abs=1e-4)
        mine = [r["expected_accept_len_256"][str(s)] for r in rows]
        assert min(mine) < info["expected_accept_len"]["256"][str(s)] < max(mine)
    rates = info["per_position"]["256"]["4"]
    assert len(rates) == 4 and all(0.5 < r < 1 for r in rates)
    assert "expected_accept_len_chat" not in json.loads((built.root / "tiny.json").read_text())


@pytest.mark.parametrize("args", [
    ["--acceptance", "oracle", "--paths", "8"],
    ["--acceptance", "0.7", "--alternatives", "0.5", "--paths", "8"],
    ["--acceptance", "0.8", "--paths", "1"],
    ["--acceptance", "0.8", "--paths", "999"],
    ["--acceptance", "0.8", "--paths", "many"],
])
def test_bad_paths_flags_exit_2(tmp_path, capsys, args):
    rc = cli.main(["tiny", "--out", str(tmp_path / "o"), *args])
    assert rc == 2
    assert not (tmp_path / "o").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
