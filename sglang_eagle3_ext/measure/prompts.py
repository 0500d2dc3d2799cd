"""Prompt files for `bench --prompts FILE`: the formats people already have on disk.

A prompt is either a string (sent as one user message) or a list of chat messages
(``[{"role": ..., "content": ...}, ...]``, sent as is). Formats, told apart by content:

- plain text: one prompt per non-empty line;
- a JSON list of strings;
- chat JSONL: one JSON object per line with ``messages`` (OpenAI chat format);
- ShareGPT: a JSON list of ``{"conversations": [{"from": "human", "value": ...}, ...]}``; the
  conversation up to (not including) its last assistant turn is sent, so the model answers it.
"""

from __future__ import annotations

from typing import Any

from ..runtime.errors import UserError
from ..runtime.safeparse import Unreadable, json_loads, read_bytes

PROMPTS_LIMIT = 1 << 30  # ShareGPT_V3 is ~670 MB
Prompt = str | list[dict[str, str]]

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                   "system": "system"}


def _bad(path: str, why: str) -> UserError:
    return UserError(f"--prompts {path}: {why}", exit_code=2)


def _messages(msgs: Any, path: str, where: str) -> list[dict[str, str]]:
    if not isinstance(msgs, list) or not msgs:
        raise _bad(path, f"{where}: 'messages' must be a non-empty list")
    out = []
    for m in msgs:
        if not isinstance(m, dict) or "role" not in m or not isinstance(m.get("content"), str):
            raise _bad(path, f"{where}: each message needs 'role' and a string 'content'")
        out.append({"role": str(m["role"]), "content": m["content"]})
    return out


def _sharegpt(item: Any, path: str, i: int) -> list[dict[str, str]] | None:
    conv = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(conv, list):
        raise _bad(path, f"item {i}: ShareGPT items need a 'conversations' list")
    msgs = []
    for turn in conv:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise _bad(path, f"item {i}: each ShareGPT turn needs 'from' and a string 'value'")
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise _bad(path, f"item {i}: unknown ShareGPT speaker {turn.get('from')!r}")
        msgs.append({"role": role, "content": turn["value"]})
    while msgs and msgs[-1]["role"] == "assistant":
        msgs.pop()  # the model writes the answer; sending it would only lengthen the prompt
    return msgs if any(m["role"] == "user" for m in msgs) else None


def parse_prompts(text: str, path: str = "FILE") -> list[Prompt]:
    """Prompts from a file's text, in any of the formats above; UserError(2) when malformed."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json_loads(text)
        except ValueError as exc:
            raise _bad(path, f"invalid JSON list ({exc})") from exc
        if data and all(isinstance(x, dict) for x in data):
            out: list[Prompt] = []
            for i, item in enumerate(data):
                if "messages" in item:
                    out.append(_messages(item["messages"], path, f"item {i}"))
                else:
                    conv = _sharegpt(item, path, i)
                    if conv:
                        out.append(conv[0]["content"] if len(conv) == 1 else conv)
            return out
        if not all(isinstance(x, str) for x in data):
            raise _bad(path, "a JSON list of strings, of {'messages': [...]} or of ShareGPT items")
        return [x for x in data if x.strip()]
    if stripped.startswith("{"):  # chat JSONL
        prompts: list[Prompt] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json_loads(line)
            except ValueError as exc:
                raise _bad(path, f"line {n}: not JSON ({exc})") from exc
            if not isinstance(obj, dict) or "messages" not in obj:
                raise _bad(path, f"line {n}: chat JSONL lines need a 'messages' list")
            prompts.append(_messages(obj["messages"], path, f"line {n}"))
        return prompts
    return [line for line in text.splitlines() if line.strip()]


def load_prompts(path: str) -> list[Prompt]:
    """The bounded read (safeparse: a regular file of at most 1 GiB; a binary head refused before
    the rest is read), then ``parse_prompts``; UserError(2), one line."""
    try:
        raw = read_bytes(path, what="a prompt file (text, a JSON list, chat JSONL or ShareGPT JSON)",
                         limit=PROMPTS_LIMIT, text=True)
    except Unreadable as exc:
        msg = str(exc)
        raise _bad(path, msg[len(f"{path}: "):] if msg.startswith(f"{path}: ") else msg) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    prompts = parse_prompts(text, path)
    if not prompts:
        raise _bad(path, "no prompts in the file")
    return prompts


def messages_of(prompt: Prompt) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
