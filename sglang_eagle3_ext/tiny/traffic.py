"""Traffic a user would recognise, for a tiny build (`sgl-eagle3 traffic`): a ShareGPT file of
requests with varied prompt lengths and a long-tailed answer-length mix, each carrying what its
acceptance should be.

The tiny target's next token depends on the last token only, so a request's acceptance is set by
the word its prompt ends with and by its length; everything before the word is filler that
lengthens the prefill (tens to thousands of tokens) without moving the walk. Builds:

- ``tiny --paths N`` (chain): the prompt ends with one of the N path words (prompts-paths.jsonl);
- ``tiny --regions ...`` (tree): it ends with a region's marker word (easy / medium / hard);
- a plain chain build (P): every chat prompt ends with the template's ``<|assistant|>``, so the
  acceptance varies with the length only.

Each item: ``{"id", "conversations": [human prompt, gpt answer], "prompt_len", "output_len",
"expect"}``. The answer is ``output_len`` single-token words, so SGLang's bench_serving, which
takes a ShareGPT answer's token count as the request's output length (``datasets/sharegpt.py``),
asks for the same length as our bench (which reads ``output_len``). ``expect.accept_len``: one
greedy request of that length from that word, counted as SGLang's counter counts it (completion
tokens / verify calls, incl. the bonus token: construct.simulate_request, trees.simulate_tree_request),
per steps (chains, topk 1) or per tree key ``s{steps}.k{topk}.d{draft_tokens}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..documents.jsonio import read_json
from ..measure.arrivals import Lengths, length_stream
from ..runtime.errors import UserError
from . import trees
from .construct import simulate_request
from .paths import PREFIX, PROMPTS_FILE
from .tokenizer import MAX_POS

CHAIN_STEPS = tuple(range(1, 9))
TREE_CONFIGS = ((1, 1, 2), (2, 1, 3), (3, 1, 4), (4, 1, 5), (5, 1, 6), (3, 2, 7), (3, 4, 13), (5, 4, 21),
                (5, 8, 21))
MAX_REQUESTS = 100_000
TAIL_TOKENS = 8        # room for "Tell me about WORD" at the shortest prompt
ROOM = 16              # template tokens and slack under the context
MIN_OUTPUT = 4         # bench_serving drops answers under 2 tokens and refuses fixed lengths < 4


def _bad(why: str) -> UserError:
    return UserError(f"--build: {why}", exit_code=2)


_DAMAGE = (KeyError, IndexError, TypeError, ValueError, AttributeError)  # what a damaged build's data raises


def _damaged(build: Path, exc: BaseException) -> UserError:
    return _bad(f"{build}: a damaged build ({type(exc).__name__}: {str(exc)[:200]}); build it again with "
                f"`sgl-eagle3 tiny --out {build}`")


def _load_build(build: Path) -> dict[str, Any]:
    """What the generator needs from a build folder: maps, words, the tokenizer (from the folder
    only, never the model hub); one line for a missing or damaged part."""
    if not build.is_dir():
        raise _bad(f"{build}: no such folder (a folder written by `sgl-eagle3 tiny --out`)")
    try:
        out = _read_build(build)
    except UserError:
        raise
    except _DAMAGE as exc:  # a file edited or cut short: wrong types, missing keys, short lists
        raise _damaged(build, exc) from None
    out["tok"] = _tokenizer(build)
    return out


def _tokenizer(build: Path) -> Any:
    target = build / "target"
    if not (target / "tokenizer_config.json").is_file():
        raise _bad(f"{build}: no tokenizer in {target} (a folder written by `sgl-eagle3 tiny --out`)")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise UserError(f"traffic needs transformers (pip install 'sglang-eagle3-ext[tiny]'): {exc}") from None
    try:  # local_files_only: a path that is not there is never looked up on the model hub
        return AutoTokenizer.from_pretrained(str(target.resolve()), local_files_only=True)
    except (OSError, *_DAMAGE) as exc:
        raise _bad(f"{target}: the tokenizer does not load ({type(exc).__name__}: {str(exc)[:200]})") from None


def _read_build(build: Path) -> dict[str, Any]:
    if not (build / "tiny.json").is_file():
        raise _bad(f"{build}: no tiny.json (a folder written by `sgl-eagle3 tiny --out`)")
    info = read_json(build / "tiny.json")
    if not isinstance(info, dict) or not str(info.get("schema", "")).startswith("sgl_eagle3_tiny/"):
        raise _bad(f"{build}/tiny.json: not a tiny build's description")
    if not (build / "maps.json").is_file():
        raise _bad(f"{build}: no maps.json: an oracle or random build, whose acceptance does not "
                   "depend on the request (build with --acceptance P, and --paths N or --regions)")
    maps = read_json(build / "maps.json")
    if not isinstance(maps, dict) or not isinstance(maps.get("f"), list) or not isinstance(maps.get("g"), list):
        raise _bad(f"{build}/maps.json: no f / g maps")
    out: dict[str, Any] = {"f": maps["f"], "g": maps["g"], "tree": None, "words": []}
    tree = info.get("tree") if isinstance(info.get("tree"), dict) else None
    if tree and tree.get("regions"):
        out["tree"] = trees.maps_from_dict(maps["f"], maps["tree"], len(maps["tree"]["rank"]))
        out["kind"] = "regions"
        out["words"] = [{"word": w, "region": r["name"], "p": r["p"], "last_token": r["marker_token"]}
                        for w, r in zip(tree["markers"], tree["regions"], strict=True)]
    elif tree:
        raise _bad(f"{build}: a tree build without --regions: its chat prompts all walk one path "
                   "(build with --regions P1,P2,...)")
    elif isinstance(info.get("paths"), dict):
        out["kind"] = "paths"
        try:
            text = (build / PROMPTS_FILE).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _bad(f"{build / PROMPTS_FILE}: cannot read it ({exc})") from None
        for line in text.splitlines():
            if line.strip():
                p = json.loads(line)
                w = {"word": p["word"], "path": p["path"], "last_token": p["last_token"]}
                if not isinstance(w["word"], str) or not isinstance(w["last_token"], int):
                    raise TypeError(f"{PROMPTS_FILE}: a word that is no text or a last_token that is no id")
                out["words"].append(w)
    if not out["f"] or not all(isinstance(x, int) for x in out["f"]):
        raise TypeError("maps.json: f is not a list of token ids")
    else:
        out["kind"] = "chain"
    return out


def _pool(tok: Any) -> list[str]:
    """Whole words that are one token each with their leading space (so n of them are n tokens)."""
    words = []
    for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 3:
            if len(tok.encode(" " + t[1:])) == 1:
                words.append(t[1:])
    if len(words) < 50:
        raise _bad("the build's tokenizer has too few whole-word tokens for filler text")
    return words


def _words_text(pool: list[str], rng: Any, n: int) -> str:
    return "".join(" " + rng.choice(pool) for _ in range(n))


def _last_token(tok: Any, content: str) -> int:
    """Last id of the chat prompt SGLang builds for one user message (the target's template)."""
    ids = tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                  tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return int(ids[-1])


def expectation(b: dict[str, Any], last: int, n: int, cache: dict[Any, dict[str, float]]) -> dict[str, float]:
    key = (last, n)
    if key not in cache:
        if b["tree"] is not None:
            cache[key] = {trees.key(s, k, d): round(trees.simulate_tree_request(b["tree"], s, k, d, last, n).accept_len, 4)
                          for s, k, d in TREE_CONFIGS}
        else:
            cache[key] = {str(s): round(simulate_request(b["f"], b["g"], s, last, n)[0], 4) for s in CHAIN_STEPS}
    return cache[key]


def generate(build: str | Path, requests: int, seed: int, prompt_len: Lengths, output_len: Lengths,
             max_prompt: int, max_output: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(items, a summary of the file) for ``requests`` requests from build ``build``."""
    if not 1 <= requests <= MAX_REQUESTS:
        raise UserError(f"--requests: 1 to {MAX_REQUESTS}", exit_code=2)
    if not MIN_OUTPUT <= max_output or not TAIL_TOKENS + 4 <= max_prompt \
            or max_prompt + max_output + ROOM > MAX_POS:
        raise UserError(f"--max-prompt-len + --max-output-len must fit the build's context ({MAX_POS} "
                        f"tokens, {ROOM} kept for the template), with --max-output-len >= {MIN_OUTPUT}",
                        exit_code=2)
    b = _load_build(Path(build))
    try:
        return _generate(b, requests, seed, prompt_len, output_len, max_prompt, max_output)
    except _DAMAGE as exc:  # maps that do not fit the tokenizer or each other
        raise _damaged(Path(build), exc) from None


def _generate(b: dict[str, Any], requests: int, seed: int, prompt_len: Lengths, output_len: Lengths,
              max_prompt: int, max_output: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tok = b["tok"]
    pool = _pool(tok)
    r_len, r_word, r_text = (length_stream(seed, w) for w in ("traffic-lengths", "traffic-words", "traffic-text"))
    cache: dict[Any, dict[str, float]] = {}
    tails: dict[str, int] = {}
    items = []
    for i in range(requests):
        n_out = output_len.draw(r_len, MIN_OUTPUT, max_output)
        n_in = prompt_len.draw(r_len, TAIL_TOKENS + 4, max_prompt)
        w = r_word.choice(b["words"]) if b["words"] else None
        tail = f"{PREFIX}{w['word']}" if w else "Tell me about it"
        if tail not in tails:
            tails[tail] = len(tok.encode(" " + tail))
        content = _words_text(pool, r_text, max(1, n_in - tails[tail])) + " " + tail
        last = _last_token(tok, content)
        if w and last != w["last_token"]:
            raise UserError(f"the build's template does not end a prompt with {w['word']!r} "
                            f"(last token {last}, expected {w['last_token']})")
        answer = _words_text(pool, r_text, n_out)
        if len(tok.encode(answer)) != n_out:
            raise UserError(f"an answer of {n_out} words is {len(tok.encode(answer))} tokens: the "
                            "tokenizer merges words (not a tiny build's tokenizer?)")
        expect: dict[str, Any] = {"kind": b["kind"], "last_token": last, "start": b["f"][last],
                                  "accept_len": expectation(b, last, n_out, cache)}
        if w:
            expect.update({k: v for k, v in w.items() if k != "last_token"})
        items.append({"id": f"req-{i}", "prompt_len": len(tok.encode(content)), "output_len": n_out,
                      "expect": expect,
                      "conversations": [{"from": "human", "value": content}, {"from": "gpt", "value": answer}]})
    return items, summarize(items, b["kind"])


def summarize(items: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Length quantiles, requests per word, and the file's pooled expectation (all tokens over
    all expected verifies: SGLang's counter over one pass of the file)."""
    from ..measure.serving_stats import plain_percentile

    def q(xs: list[int]) -> dict[str, Any]:
        return {"min": min(xs), "p50": plain_percentile(xs, 50), "p90": plain_percentile(xs, 90),
                "p99": plain_percentile(xs, 99), "max": max(xs)}

    keys = list(items[0]["expect"]["accept_len"])
    toks = [it["output_len"] for it in items]
    pooled = {k: round(sum(toks) / sum(t / it["expect"]["accept_len"][k] for t, it in zip(toks, items, strict=True)), 4)
              for k in keys}
    by: dict[str, int] = {}
    for it in items:
        label = it["expect"].get("word") or "(chat template)"
        by[label] = by.get(label, 0) + 1
    return {"requests": len(items), "kind": kind, "prompt_len": q([it["prompt_len"] for it in items]),
            "output_len": q(toks), "by_word": by, "expected_accept_len": pooled,
            "expected_range": {k: [min(it["expect"]["accept_len"][k] for it in items),
                                   max(it["expect"]["accept_len"][k] for it in items)] for k in keys}}
