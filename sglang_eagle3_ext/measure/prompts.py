"""Prompt files for `bench --prompts FILE`: the formats people already have on disk.

A prompt is either a string (sent as one user message) or a list of chat messages
(``[{"role": ..., "content": ...}, ...]``, sent as is). Formats, told apart by content:

- plain text: one prompt per non-empty line;
- a JSON list of strings;
- chat JSONL: one JSON object per line with ``messages`` (OpenAI chat format);
- ShareGPT: a JSON list (or JSONL, one item per line) of ``{"conversations": [{"from": "human",
  "value": ...}, ...]}`` (``conversation`` too, and turns spelled ``role`` / ``content``, as
  SGLang bench_serving's sharegpt and custom loaders accept); the conversation up to (not
  including) its last assistant turn is sent, so the model answers it.

An item (a JSON object) may say how long its answer is: ``output_len`` (what the traffic
generator writes) or ``max_tokens``; its other small fields (``id``, ``expect``, ...) ride along
into the open-loop result per request (``PromptItem.meta``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError
from ..runtime.safeparse import Unreadable, json_loads, read_bytes

PROMPTS_LIMIT = 1 << 30  # ShareGPT_V3 is ~670 MB
Prompt = str | list[dict[str, str]]

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                   "system": "system"}
_BODY_KEYS = ("conversations", "conversation", "messages", "output_len", "max_tokens")
META_FIELD_CAP = 1024   # bytes of JSON per carried field
META_CAP = 4096         # bytes of JSON per item
MAX_OUTPUT_LEN = 1_000_000


@dataclass
class PromptItem:
    prompt: Prompt
    output_len: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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


def _sharegpt(item: Any, path: str, where: str) -> list[dict[str, str]] | None:
    conv = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
    if not isinstance(conv, list):
        raise _bad(path, f"{where}: ShareGPT items need a 'conversations' list")
    msgs = []
    for turn in conv:
        text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
        if not isinstance(text, str):
            raise _bad(path, f"{where}: each ShareGPT turn needs 'from' and a string 'value'")
        who = turn.get("from", turn.get("role", ""))
        role = _SHAREGPT_ROLES.get(str(who).lower())
        if role is None:
            raise _bad(path, f"{where}: unknown ShareGPT speaker {who!r}")
        msgs.append({"role": role, "content": text})
    while msgs and msgs[-1]["role"] == "assistant":
        msgs.pop()  # the model writes the answer; sending it would only lengthen the prompt
    return msgs if any(m["role"] == "user" for m in msgs) else None


def _length(item: dict[str, Any], path: str, where: str) -> int | None:
    for k in ("output_len", "max_tokens"):
        if k in item:
            v = item[k]
            if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_OUTPUT_LEN):
                raise _bad(path, f"{where}: {k} must be a whole number from 1 to {MAX_OUTPUT_LEN}, "
                                 f"got {json.dumps(v)[:40]}")
            return v
    return None


def _meta(item: dict[str, Any]) -> dict[str, Any]:
    """The item's other fields that are small (bounded per field and per item)."""
    out: dict[str, Any] = {}
    size = 0
    for k, v in item.items():
        if k in _BODY_KEYS:
            continue
        n = len(json.dumps(v)) + len(k)
        if n <= META_FIELD_CAP and size + n <= META_CAP:
            out[k] = v
            size += n
    return out


def _object_item(obj: dict[str, Any], path: str, where: str) -> PromptItem | None:
    if "messages" in obj:
        prompt: Prompt | None = _messages(obj["messages"], path, where)
    else:
        conv = _sharegpt(obj, path, where)
        prompt = None if conv is None else (conv[0]["content"] if len(conv) == 1 else conv)
    if prompt is None:
        return None
    return PromptItem(prompt, _length(obj, path, where), _meta(obj))


_JSON_VALUE = re.compile(r'\s*(["{\[\]}\-0-9]|(true|false|null)\s*[,\]}])')


def json_shaped(stripped: str) -> bool:
    """Does the text open as JSON does: ``[`` or ``{`` followed by a JSON value (or the close)?
    A plain-text prompt may begin with a bracket too (``[INST] ...``, ``{name} wrote ...``)."""
    return stripped[:1] in ("[", "{") and _JSON_VALUE.match(stripped, 1) is not None


def parse_items(text: str, path: str = "FILE") -> list[PromptItem]:
    """Prompt items from a file's text, in any of the formats above; UserError(2) when malformed.
    A UTF-8 byte-order mark (what some editors save) is not part of the text."""
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    if not json_shaped(stripped):
        return [PromptItem(line) for line in text.splitlines() if line.strip()]
    if stripped.startswith("["):
        try:
            data = json_loads(text)
        except ValueError as exc:
            raise _bad(path, f"invalid JSON list ({exc}); it opens as JSON does, so it is not read as "
                             "one prompt per line") from exc
        if data and all(isinstance(x, dict) for x in data):
            items = [_object_item(obj, path, f"item {i}") for i, obj in enumerate(data)]
            return [it for it in items if it is not None]
        if not all(isinstance(x, str) for x in data):
            raise _bad(path, "a JSON list of strings, of {'messages': [...]} or of ShareGPT items")
        return [PromptItem(x) for x in data if x.strip()]
    if stripped.startswith("{"):  # chat JSONL, or ShareGPT items one per line
        out: list[PromptItem] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json_loads(line)
            except ValueError as exc:
                raise _bad(path, f"line {n}: not JSON ({exc})") from exc
            if not isinstance(obj, dict) or not any(k in obj for k in ("messages", "conversations",
                                                                       "conversation")):
                raise _bad(path, f"line {n}: JSONL lines need a 'messages' or 'conversations' list")
            it = _object_item(obj, path, f"line {n}")
            if it is not None:
                out.append(it)
        return out
    return [PromptItem(line) for line in text.splitlines() if line.strip()]


def parse_prompts(text: str, path: str = "FILE") -> list[Prompt]:
    """The prompts alone (parse_items)."""
    return [it.prompt for it in parse_items(text, path)]


def load_items(path: str) -> list[PromptItem]:
    """The bounded read (safeparse: a regular file of at most 1 GiB; a binary head refused before
    the rest is read), then ``parse_items``; UserError(2), one line."""
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
    items = parse_items(text, path)
    if not items:
        raise _bad(path, "no prompts in the file")
    return items


def load_prompts(path: str) -> list[Prompt]:
    return [it.prompt for it in load_items(path)]


def messages_of(prompt: Prompt) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def text_of(prompt: Prompt) -> str | None:
    """The text ``/generate`` gets (``bench --api generate``): the prompt, or its one message's
    content (bench_serving's ShareGPT loader sends the first turn's text); None for a
    conversation of several messages, which has no one text without a chat template."""
    if isinstance(prompt, str):
        return prompt
    return prompt[0]["content"] if len(prompt) == 1 else None
