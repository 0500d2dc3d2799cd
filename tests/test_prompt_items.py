"""Prompt files as people have them (measure/prompts.py): ShareGPT conversations (multi-turn, the
`conversations` / `from` / `value` shape, `conversation`, role/content turns, JSON and JSONL),
per-item answer lengths and metadata, and malformed items (one line, exit 2)."""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_ext.measure.prompts import META_CAP, load_items, parse_items
from sglang_eagle3_ext.runtime.errors import UserError

SHARE = [
    {"id": "a1", "conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi there"}]},
    {"id": "a2", "conversations": [{"from": "system", "value": "be terse"}, {"from": "human", "value": "q1"},
                                   {"from": "gpt", "value": "r1"}, {"from": "human", "value": "q2"},
                                   {"from": "gpt", "value": "r2"}]},
    {"id": "a3", "conversation": [{"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]},
    {"id": "a4", "conversations": [{"from": "gpt", "value": "an answer alone"}]},
]


def test_sharegpt_json_multi_turn_and_shapes():
    items = parse_items(json.dumps(SHARE))
    assert [it.meta["id"] for it in items] == ["a1", "a2", "a3"]  # no user turn: left out
    assert items[0].prompt == "hello"  # one user turn: a plain prompt (the gpt answer is not sent)
    assert items[1].prompt == [{"role": "system", "content": "be terse"}, {"role": "user", "content": "q1"},
                               {"role": "assistant", "content": "r1"}, {"role": "user", "content": "q2"}]
    assert items[2].prompt == "c"
    assert all(it.output_len is None for it in items)


def test_sharegpt_jsonl_and_lengths():
    lines = [dict(SHARE[0], output_len=64), dict(SHARE[2], max_tokens=9, expect={"accept_len": {"3": 2.5}})]
    items = parse_items("\n".join(json.dumps(x) for x in lines) + "\n")
    assert [it.output_len for it in items] == [64, 9]
    assert items[1].meta == {"id": "a3", "expect": {"accept_len": {"3": 2.5}}}
    chat = parse_items('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "tag": "t"}\n')
    assert chat[0].prompt == [{"role": "user", "content": "x"}] and chat[0].output_len == 5
    assert chat[0].meta == {"tag": "t"}


def test_meta_is_bounded():
    big = dict(SHARE[0], blob="x" * 5000, **{f"k{i}": "y" * 500 for i in range(20)})
    (it,) = parse_items(json.dumps([big]))
    assert "blob" not in it.meta and len(json.dumps(it.meta)) <= META_CAP + 200


@pytest.mark.parametrize("bad,words", [
    ([dict(SHARE[0], output_len=0)], "output_len"),
    ([dict(SHARE[0], output_len=1.5)], "output_len"),
    ([dict(SHARE[0], output_len=True)], "output_len"),
    ([dict(SHARE[0], max_tokens="7")], "max_tokens"),
    ([{"conversations": [{"from": "alien", "value": "x"}]}], "unknown ShareGPT speaker"),
    ([{"conversations": [{"from": "human", "value": 3}]}], "string 'value'"),
    ([{"conversations": "nope"}], "'conversations' list"),
])
def test_bad_items_are_one_line(tmp_path, bad, words):
    f = tmp_path / "p.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(UserError) as e:
        load_items(str(f))
    assert e.value.exit_code == 2 and words in str(e.value) and "\n" not in str(e.value)


def test_jsonl_line_without_a_conversation(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"conversations": [{"from": "human", "value": "ok"}]}\n{"other": 1}\n')
    with pytest.raises(UserError) as e:
        load_items(str(f))
    assert "line 2" in str(e.value)


def test_a_byte_order_mark_is_not_part_of_the_file(tmp_path):
    """An editor's UTF-8 BOM before a JSON list (was: the raw JSON sent as one prompt, the
    lengths ignored) or before plain lines (was: the BOM inside the first prompt)."""
    f = tmp_path / "p.json"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"messages": [{"role": "user", "content": "a"}],
                                                  "output_len": 7}]).encode())
    items = load_items(str(f))
    assert len(items) == 1 and items[0].output_len == 7
    f.write_bytes(b"\xef\xbb\xbfhello\nworld\n")
    assert [it.prompt for it in load_items(str(f))] == ["hello", "world"]
    f.write_bytes(b"\xef\xbb\xbf" + b'{"messages": [{"role": "user", "content": "x"}]}\n')
    assert load_items(str(f))[0].prompt == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("first", ["[INST] Write a poem [/INST]", "{name} asked: why?", "[note] x",
                                   "[trueish] y", "  [INST] z"])
def test_plain_text_whose_first_prompt_begins_with_a_bracket(tmp_path, first):
    """Was: refused as bad JSON. Text that does not open as JSON is one prompt per line."""
    f = tmp_path / "p.txt"
    f.write_text(f"{first}\nsecond prompt\n")
    assert [it.prompt for it in load_items(str(f))] == [first, "second prompt"]


@pytest.mark.parametrize("text", ['["a", "b"', '[{"messages": 1}', '{"messages": [}\n'])
def test_json_shaped_but_broken_is_still_refused_with_why(text):
    with pytest.raises(UserError) as e:
        parse_items(text, "p.json")
    assert e.value.exit_code == 2 and str(e.value).startswith("--prompts p.json:")
