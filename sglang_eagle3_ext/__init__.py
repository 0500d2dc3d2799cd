"""sglang-eagle3-ext: make EAGLE-3 speculative decoding in SGLang measurable and tunable.

One folder per role (docs/reference/architecture.md): ``runtime/`` is what SGLang's processes import
(stdlib only at module level); ``documents/`` the files passed between stages; ``serve/``,
``measure/``, ``tune/``, ``tiny/``, ``patcher/`` the workbench; ``commands/`` the CLI. The three
names from before ``runtime/`` existed (``probes``, ``layers``, ``plugin``) stay importable
(``_aliases``).
"""

__version__ = "0.1.0"
