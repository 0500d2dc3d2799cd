"""What SGLang's own processes import: the plugin entry point, the probes and the layer override
that source-patched files call, and what those read (settings, step control, NCCL preset...).

Every module under this package imports only the standard library (and other modules of this
package) at module level, never raises into SGLang and costs nothing when off;
tests/test_boundary.py enforces the import rule. The workbench (CLI, bench, sweep, scan, patcher
engine, tiny) lives above it and may import anything; nothing here imports the workbench at
module level. docs/reference/architecture.md, "Two sides".
"""
