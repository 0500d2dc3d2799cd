"""sglang-eagle3-ext: make EAGLE-3 speculative decoding in SGLang measurable and tunable."""

__version__ = "0.1.0"
