"""Measured vs expected accept length of the partial-acceptance tiny models (issue 14).

The H200 numbers are SGLang 0.5.16's own counters (completion tokens / verify calls) from the raw
runs in docs/data/h200-2026-12-01 (bench: one chat prompt, 256 greedy tokens). No GPU here: the
expectation side is the package's simulation of the maps, which is what ``tiny`` prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext import tiny
from sglang_eagle3_ext.measure.bench import DEFAULT_PROMPT
from sglang_eagle3_ext.tiny import construct
from sglang_eagle3_ext.tiny.tokenizer import build_tokenizer, chat_last_token

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "h200-2026-12-01"
# (P, steps, bench.json) of every H200 speculative run with the 8B and MoE shapes
RUNS = [(0.8, s, DATA / "8b-p08" / "p08" / "configs" / f"eagle3-s{s}-k1-d{s + 1}-no-nccl" / "bench.json")
        for s in range(1, 6)]
RUNS += [(0.6, 3, DATA / "8b-wire" / "p06" / "configs" / "eagle3-s3-k1-d4-no-nccl" / "bench.json"),
         (0.8, 2, DATA / "moe" / "moe" / "configs" / "eagle3-s2-k1-d3-no-nccl" / "bench.json")]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tok")
    build_tokenizer(d)
    return d


def test_every_chat_prompt_ends_with_the_same_token(tok_dir: Path) -> None:
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(tok_dir))
    last = chat_last_token(tok_dir)
    for prompt in (DEFAULT_PROMPT, "hi", "Ba ku zo. 12"):
        text = t.apply_chat_template([{"role": "user", "content": prompt}],
                                     add_generation_prompt=True, tokenize=False)
        assert t(text)["input_ids"][-1] == last


@pytest.mark.parametrize("p,steps,path", RUNS, ids=[f"P{p}-s{s}-{pa.parts[-5]}" for p, s, pa in RUNS])
def test_chat_expectation_matches_h200(tok_dir: Path, p: float, steps: int, path: Path) -> None:
    """The printed chat-request expectation is what the H200 measured (fails before the fix:
    the only number then was the cycle average, 6-10 % below from 2 steps on)."""
    bench = json.loads(path.read_text())
    assert bench["params"]["max_tokens"] == 256 and bench["params"]["temperature"] == 0
    measured = bench["summary"]["accept_length"]
    f, g, _ = construct.partial_maps(p, 0, 32000)
    info = construct.partial_info(f, g, 32000, chat_last_token(tok_dir))
    expected = info["expected_accept_len_chat"]["256"][str(steps)]
    assert abs(measured - expected) / measured < 0.03, (measured, expected)
    # same verify count, not just close: the real draft proposes exactly g
    assert round(256 / measured) == round(256 / expected)
    lo, hi = info["request_range"]["256"][str(steps)]
    assert lo <= measured <= hi


def test_cycle_average_is_not_what_one_chat_request_measures() -> None:
    """The cause: one request is one fixed 256-token segment of the walk; the cycle average is
    the mean over all segments (H200 3 steps: 3.20 measured vs 2.96 average)."""
    f, g, _ = construct.partial_maps(0.8, 0, 32000)
    avg = construct.simulate_accept(f, g, 3)[0]
    lo, hi = construct.request_spread(f, g, 3, 256, 32000)
    assert lo < avg < hi and hi - lo > 0.5
    long = construct.simulate_request(f, g, 3, 198, 20000)[0]
    assert abs(long - avg) / avg < 0.01  # a long enough request converges to the average


def test_simulate_request_extremes() -> None:
    f, _, _ = construct.partial_maps(0.5, 0, 64)
    # all drafts right: 255 tokens after the prefill, 4 per verify -> 64 verifies
    alen, rates, hist = construct.simulate_request(f, f, 3, 5, 256)
    assert alen == 256 / 64 and rates == [1.0, 1.0, 1.0] and hist == [0, 0, 0, 64]
    g = [f[f[x]] for x in range(len(f))]  # never the next token on the cycle
    assert construct.simulate_request(f, g, 3, 5, 256)[:2] == (256 / 255, [0.0, 0.0, 0.0])


def test_build_writes_chat_expectation(tmp_path: Path) -> None:
    models = tiny.build(tmp_path / "m", acceptance="0.8", device="cpu")
    info = json.loads((tmp_path / "m" / "tiny.json").read_text())
    assert info["chat_last_token"] == chat_last_token(models.target)
    assert set(info["expected_accept_len_chat"]) == {"256", "1000"}
    assert info["expected_accept_len_chat"]["256"]["3"] == pytest.approx(3.2, abs=1e-4)
    assert "request_range" in info and len(info["per_position_chat"]["256"]["3"]) == 3
