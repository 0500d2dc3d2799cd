"""The in-process tokenizer: a byte-level BPE trained on deterministic synthetic text (no download)."""

from __future__ import annotations

import random
from pathlib import Path

from ..runtime.errors import UserError

VOCAB = 2048
MAX_POS = 4096
# Special tokens come last (ids 2043..2047) so that id 0 (the "oracle" token) and the whole hot set
# are ordinary text, and no construction can ever pick EOS.
SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
EOS = "<|end|>"
PAD = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


# Prompt-region builds (tiny --regions): the prompt ends with the user's own last token (no
# assistant header), so the walk of a chat request starts where its text sends it.
TAIL_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "{% if not loop.last %}<|end|>\n{% endif %}{% endfor %}"
)


def _corpus() -> list[str]:
    """Deterministic syllable text: rich enough for the BPE trainer to fill the whole vocab."""
    rng = random.Random(20260101)
    cons = "b c d f g h j k l m n p r s t v w z ch sh th".split()
    vow = "a e i o u ai ou ea".split()
    syl = [c + v for c in cons for v in vow] + vow
    words = ["".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    lines = []
    for _ in range(4000):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        lines.append(f"{s.capitalize()}{rng.choice('.,!?;')} {rng.randint(0, 9999)}")
    return lines


def build_tokenizer(*outs: Path, template: str = CHAT_TEMPLATE) -> dict[str, int]:
    """Train the byte-level BPE, save it (with chat template) into each folder; return special ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS), min_frequency=1, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(_corpus(), trainer)
    if tok.get_vocab_size() != VOCAB - len(SPECIALS):  # corpus too poor for this tokenizers version
        raise UserError(f"tokenizer training gave {tok.get_vocab_size()} tokens, "
                        f"expected {VOCAB - len(SPECIALS)}")
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   model_max_length=MAX_POS, clean_up_tokenization_spaces=False)
    fast.chat_template = template
    for out in outs:
        fast.save_pretrained(str(out))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    if min(ids.values()) != VOCAB - len(SPECIALS):
        raise UserError(f"special token ids not at the end of the vocab: {ids}")
    return ids


def chat_last_token(folder: Path) -> int:
    """Last id of every chat prompt: the template ends each one with ``<|assistant|>\\n``."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode("<|assistant|>\n").ids[-1]


def marker_words(folder: Path, count: int) -> list[tuple[str, int]]:
    """Whole words (cold ids >= 1024, off the hot cycle) that end a prompt as one token:
    the highest ids first, so the list does not depend on the seed."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    inv = {i: t for t, i in tok.get_vocab().items()}
    out: list[tuple[str, int]] = []
    for i in range(VOCAB - len(SPECIALS) - 1, 1023, -1):
        t = inv.get(i, "")
        if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 4 \
                and tok.encode("Tell me about " + t[1:]).ids[-1] == i:
            out.append((t[1:], i))
            if len(out) == count:
                break
    if len(out) < count:
        raise UserError(f"tokenizer has fewer than {count} marker words")
    return out
