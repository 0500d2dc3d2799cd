"""Chain builds whose prompts walk different paths (`tiny --paths N`).

The tiny target's next token depends on the last token only, and the default chat template ends
every prompt with the same ``<|assistant|>\\n``: every chat request walks the same stretch of the
cycle, so a prompt set is one path repeated. Quantities that depend on where cycles start then
take that one path's values: a step count's accept length differs from the per-position model by
up to a few % (benchmarks/policy_path_bias.py), and so does the scan's per-step acceptance.

A paths build writes the prompt-region template (the prompt ends with the user's own last
token) and ``prompts-paths.jsonl``: N prompts ending in N different whole words (cold ids), whose
targets f(word) are N different points of the hot cycle. A bench or scan given that file
(``--prompts``) cycles through them, so its requests walk N different stretches: traffic whose
acceptance is, over the set, the cycle's own. Each prompt line carries its expectation; tiny.json
``paths`` the pooled one (tokens over verifies over one pass of the set, SGLang's counter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .construct import REQUEST_TOKENS, count_verify, simulate_request
from .tokenizer import marker_words

MAX_PATHS = 256
PROMPTS_FILE = "prompts-paths.jsonl"
PREFIX = "Tell me about "  # marker_words checks the word ends this prompt as one token


def parse_paths(value: Any) -> int | None:
    """``--paths N``: None when absent; 2..MAX_PATHS (UserError exit 2 otherwise)."""
    if value in (None, "", 0):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UserError(f"--paths takes a whole number of prompts, got {value!r}", exit_code=2) from None
    if not 2 <= n <= MAX_PATHS:
        raise UserError(f"--paths {n}: between 2 and {MAX_PATHS} prompts", exit_code=2)
    return n


def path_words(tokenizer_dir: Path, f: list[int], count: int) -> list[tuple[str, int]]:
    """``count`` words whose walks start at different cycle points (f(word) all distinct)."""
    seen: set[int] = set()
    out: list[tuple[str, int]] = []
    for word, tid in marker_words(tokenizer_dir, min(4 * count, 400)):
        if f[tid] not in seen:
            seen.add(f[tid])
            out.append((word, tid))
            if len(out) == count:
                return out
    raise UserError(f"--paths {count}: the tokenizer has only {len(out)} words with distinct walks")


def paths_info(f: list[int], g: list[int], ids: list[int]) -> dict[str, Any]:
    """Per request length: the pooled accept length per steps (all tokens / all verifies over
    one request per prompt), pooled per-position rates, and each prompt's own accept length."""
    info: dict[str, Any] = {"expected_accept_len": {}, "per_position": {}, "per_prompt": {}}
    for tokens in REQUEST_TOKENS:
        pooled, rates_by, per = {}, {}, {}
        for s in range(1, 9):
            verifies, reached, accepted, mine = 0, [0] * s, [0] * s, []
            for x in ids:
                acc, _, hist = simulate_request(f, g, s, x, tokens)
                mine.append(round(acc, 4))
                verifies += sum(hist)
                for n, c in enumerate(hist):  # hist[n]: verifies that accepted n drafts
                    for _ in range(c):
                        count_verify(n, s, reached, accepted)
            pooled[str(s)] = round(tokens * len(ids) / verifies, 4)
            rates_by[str(s)] = [round(a / r, 4) if r else 0.0 for a, r in zip(accepted, reached, strict=True)]
            per[str(s)] = mine
        info["expected_accept_len"][str(tokens)] = pooled
        info["per_position"][str(tokens)] = rates_by
        info["per_prompt"][str(tokens)] = per
    return info


def write_prompts(path: Path, words: list[tuple[str, int]], f: list[int], info: dict[str, Any]) -> None:
    """One chat line per word (bench / scan ``--prompts``), with its start and expectation."""
    tokens = str(REQUEST_TOKENS[0])
    lines = []
    for i, (word, tid) in enumerate(words):
        exp = {s: v[i] for s, v in info["per_prompt"][tokens].items()}
        lines.append(json.dumps({"path": i, "word": word, "last_token": tid, "start": f[tid],
                                 f"expected_accept_len_{tokens}": exp,
                                 "messages": [{"role": "user", "content": PREFIX + word}]}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
