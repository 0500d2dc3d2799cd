"""Trees beside chains in one SGLang adaptive server (0.5.16 / 0.5.23): the plugin side.

SGLang's adaptive controller holds chains only (topk 1, states keyed by step count). With
``SGLANG_EAGLE3_TREES=5x4x21@1-16,...`` and a decider (``SGLANG_EAGLE3_HOLD`` or ``_POLICY``) the
plugin adds tree states to the same controller. The server starts as an ordinary chain adaptive
server (largest chain first, page size 1); then:

- **sizing** (every process): what SGLang sizes once from the launch chain is pinned to the
  maximum over every held state: the largest draft-token count, the KV a request may allocate
  per decode (and its reserve and ``req_to_token`` headroom), the tokenizer's reserved output
  slots, the shared logits rows. Under the overlap scheduler these are decided before the next
  cycle's state is known, so they cannot follow the current state.
- **build** (scheduler, after SGLang built its chains): each tree is built by SGLang's own
  ``build_adaptive_runtime_state`` with topk overridden for the build and its graph batch sizes
  pruned to its range, and registered under its label ("5x4x21"); SGLang's EMA only ever asks
  for ints, so it can never pick a tree.
- **switch**: ``apply_runtime_state`` compares (topk, steps, tokens), not steps, and sets topk on
  both workers and in SGLang's spec settings.
- **carried width**: every draft extend emits the top-K_max candidates (the overlap relay buffers
  take their width from the first payload; a narrower payload into a wider buffer broadcasts
  silently), and each cycle's draft takes the first topk columns (sorted, so exactly the top-k).

The SGLang source this follows (file:line per release) is in docs/reference/plugin.md, "Trees".
Stdlib only at module level; hooks never raise into a serving SGLang except where serving would
be wrong (a refusal at start says why).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import settings, specstate
from .specstate import Envelope, TreeSpec

logger = logging.getLogger("sglang_eagle3_ext.plugin")

W2 = "srt/speculative/eagle_worker_v2.py"
SIZING = "srt/mem_cache/allocation_sizing.py"
RELEASES = ("0.5.16", "0.5.23")  # the two whose private methods this was checked against

# (role, file, class or "", method) per release family; "spec" differs between them
_TARGETS_COMMON = (
    ("alloc", SIZING, "", "get_alloc_len_per_decode"),
    ("headroom", SIZING, "", "get_req_to_token_extra_context_len"),
    ("logits", "srt/model_executor/model_runner.py", "ModelRunner", "max_decode_logits_rows"),
    ("override", W2, "EAGLEWorkerV2", "_override_worker_state"),
    ("apply", W2, "EAGLEWorkerV2", "apply_runtime_state"),
    ("draft", W2, "EagleDraftWorker", "draft"),
    ("extend-prefill", W2, "EagleDraftWorker", "_draft_extend_for_prefill"),
    ("extend-decode", W2, "EagleDraftWorker", "_draft_extend_for_decode"),
)
_TARGETS_0523 = (
    ("max-tokens", "srt/speculative/spec_info.py", "SpeculativeAlgorithm", "resolve_max_speculative_num_draft_tokens"),
    ("reserve", "srt/managers/utils.py", "", "compute_num_reserved_tokens"),
)
_TARGETS_0516 = (
    ("reserve", "srt/managers/tokenizer_manager.py", "TokenizerManager", "__init__"),
)
# roles whose hook must run in the launcher process too (the tokenizer lives there)
LAUNCHER_ROLES = frozenset({"max-tokens", "reserve", "alloc", "headroom"})


class _State:
    trees: list[TreeSpec] = []
    env: Envelope | None = None
    unpinned = False  # while set, max draft tokens answer SGLang's own chain value


_S = _State()


def requested(environ: Mapping[str, str] | None = None) -> tuple[list[TreeSpec], str | None]:
    """(trees asked for, refusal reason or None) from the environment."""
    if not settings.TREES.is_set(environ):
        return [], None
    raw, problem = settings.TREES.read(environ)
    if problem:
        return [], problem
    trees = specstate.parse_trees(raw)
    if not (settings.HOLD.is_set(environ) or settings.POLICY.is_set(environ)):
        return trees, (f"{settings.TREES.name} needs a decider ({settings.HOLD.name} or "
                       f"{settings.POLICY.name}): SGLang's own rule picks chains only")
    env = os.environ if environ is None else environ
    if str(env.get("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", "")).strip() in ("1", "true", "True"):
        return trees, ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 stubs the draft extend with the launch "
                       "topk: it cannot run beside held trees")
    return trees, None


def configure(trees: list[TreeSpec]) -> None:
    _S.trees = list(trees)
    _S.env = specstate.envelope(t.state for t in trees) if trees else None


def active() -> bool:
    return bool(_S.trees)


def k_max() -> int:
    return _S.env.max_topk if _S.env else 1


def plan_targets(version: str, has: Callable[[str, str, str], bool]) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The hook targets for this release and what is missing. ``has(file, cls, method)`` reads the
    release source (hookplan's ast reader)."""
    v = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])
    per = _TARGETS_0523 if v >= (0, 5, 17) else _TARGETS_0516
    targets = list(_TARGETS_COMMON) + list(per)
    missing = [f"{c + '.' if c else ''}{m} ({f})" for _, f, c, m in targets if not has(f, c, m)]
    if version not in RELEASES and not missing:
        missing = []  # structure decides; the version only confirms (the note says so)
    return targets, missing


# ------------------------------------------------------------------------------------------------
# sizing hooks (AROUND): the max over the held states

def max_tokens_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    r = original(*args, **kwargs)
    if r is None or _S.env is None or _S.unpinned:
        return r
    return max(int(r), _S.env.max_tokens)


def alloc_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    r = original(*args, **kwargs)
    return r if _S.env is None else max(int(r), _S.env.alloc_per_decode)


def headroom_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    r = original(*args, **kwargs)
    # a decode may allocate 2x alloc ahead of its committed length (SGLang's overlap reserve)
    return r if _S.env is None else max(int(r), 2 * _S.env.alloc_per_decode + 4)


def reserve_hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """0.5.23 ``compute_num_reserved_tokens``: output slots one request reserves for drafts."""
    r = original(*args, **kwargs)
    return r if _S.env is None or not r else max(int(r), _S.env.alloc_per_decode)


def tokenizer_init_hook(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """0.5.16 ``TokenizerManager.__init__`` sets ``num_reserved_tokens`` from the launch chain."""
    out = original(self, *args, **kwargs)
    n = getattr(self, "num_reserved_tokens", 0)
    if _S.env is not None and isinstance(n, int) and n > 0:
        self.num_reserved_tokens = max(n, _S.env.alloc_per_decode)
    return out


def logits_rows_hook(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """The shared logits buffer: SGLang's chain rows (computed with the chain max, so 0.5.23 does
    not multiply the full capture list by a tree's width), then each tree's own rows: its largest
    graph batch size times its draft tokens."""
    _S.unpinned = True
    try:
        r = int(original(self, *args, **kwargs))
    finally:
        _S.unpinned = False
    if _S.env is None:
        return r
    per_req = 1
    with contextlib.suppress(Exception):
        per_req = max(1, int(self.decode_num_tokens_per_req()))
    max_bs = max(1, r // per_req)
    tree_rows = max((min(t.hi, max_bs) * t.state.tokens for t in _S.trees), default=0)
    return max(r, tree_rows)


def patch_server_args_0516() -> bool:
    """0.5.16 caches ``ServerArgs.max_speculative_num_draft_tokens`` (a ``cached_property``, which
    SGLang's HookRegistry cannot wrap): the class attribute is replaced by one that takes the max
    with the trees. Returns whether it was patched."""
    from functools import cached_property

    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    cur = ServerArgs.__dict__.get("max_speculative_num_draft_tokens")
    if not isinstance(cur, cached_property) or getattr(cur.func, "__wrapped__", None) is not None:
        return False
    inner = cur.func

    def max_speculative_num_draft_tokens(self: Any) -> Any:
        return max_tokens_hook(inner, self)

    max_speculative_num_draft_tokens.__wrapped__ = inner  # type: ignore[attr-defined]
    prop = cached_property(max_speculative_num_draft_tokens)
    prop.__set_name__(ServerArgs, "max_speculative_num_draft_tokens")
    ServerArgs.max_speculative_num_draft_tokens = prop  # type: ignore[assignment]
    return True


# ------------------------------------------------------------------------------------------------
# spec settings: where topk lives per release

def write_spec(worker: Any, source: str, **fields: int) -> None:
    """Write into SGLang's resolved settings through the mutation point the release's own worker
    uses: the spec bag (0.5.23: its module imports ``get_context``) or the server args (0.5.16:
    ``self.server_args.override``; its runtime_context has a ``get_context`` of another shape)."""
    import sys

    gc = getattr(sys.modules.get(type(worker).__module__), "get_context", None)
    if callable(gc):
        gc().override(source, **fields)
    else:
        worker.server_args.override(source, **fields)


def set_spec_topk(worker: Any, topk: int, source: str) -> None:
    write_spec(worker, source, speculative_eagle_topk=topk)


def set_spec_state(worker: Any, st: specstate.State, source: str) -> None:
    write_spec(worker, source, speculative_num_steps=st.steps, speculative_num_draft_tokens=st.tokens,
               speculative_eagle_topk=st.topk)


# ------------------------------------------------------------------------------------------------
# build: the trees beside SGLang's chains (called by stepctl's init_states hook)

def state_of(rs: Any) -> specstate.State:
    """The (steps, topk, tokens) of a ``SpecRuntimeState`` (SGLang's dataclass has no topk: trees
    carry ``_eagle3_topk``)."""
    return specstate.State(int(rs.speculative_num_steps), int(getattr(rs, "_eagle3_topk", 1)),
                           int(rs.speculative_num_draft_tokens))


def build_trees(ctrl: Any) -> list[str]:
    """Build and register every configured tree on this controller; returns their labels. Raises
    with the reason when a tree cannot be built here (the server refuses to start)."""
    worker = ctrl.worker
    captured = getattr(getattr(ctrl, "params", None), "_cuda_graph_bs", None)
    labels = []
    for t in _S.trees:
        sizes = specstate.graph_sizes(t, captured)
        worker._eagle3_build_topk = t.state.topk
        try:
            rs = worker.build_adaptive_runtime_state(t.state.steps, t.state.tokens, cuda_graph_bs=sizes)
        finally:
            worker._eagle3_build_topk = None
        rs._eagle3_topk = t.state.topk
        ctrl._states[t.state.label] = rs
        labels.append(t.state.label)
        logger.info("trees: built %s with graphs for batch sizes %s", t.state.describe(),
                    sizes if sizes is not None else "none (graphs off)")
    ctrl._eagle3_trees = list(_S.trees)
    return labels


def override_hook(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """Around ``_override_worker_state`` (a context manager): while a tree is built, topk is the
    tree's on both workers and in the spec settings, set before SGLang's own overrides (which call
    the chain-buffer rebuild; with topk > 1 it leaves the live chain's buffers alone) and put back
    after its restore."""
    k = getattr(self, "_eagle3_build_topk", None)
    if not k:
        return original(self, *args, **kwargs)
    return _tree_build_cm(original, self, int(k), args, kwargs)


@contextlib.contextmanager
def _tree_build_cm(original: Callable[..., Any], self: Any, k: int, args: Any, kwargs: Any) -> Iterator[None]:
    dw = self._draft_worker
    before = (self.topk, dw.topk)
    self.topk = dw.topk = k
    set_spec_topk(self, k, "sglang_eagle3_ext.trees.build")
    try:
        with original(self, *args, **kwargs):
            yield
    finally:
        self.topk, dw.topk = before
        set_spec_topk(self, before[0], "sglang_eagle3_ext.trees.build_restore")


def apply_hook(original: Callable[..., Any], self: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
    """Around ``apply_runtime_state``: chain to chain is SGLang's own switch; any switch that
    involves a tree compares (topk, steps, tokens) and swaps every per-state resource itself,
    topk included (SGLang's switch returns early on equal steps and never touches topk)."""
    new = state_of(state)
    cur = specstate.State(int(self.speculative_num_steps), int(self.topk), int(self.speculative_num_draft_tokens))
    if new.topk == 1 and cur.topk == 1:
        return original(self, state, *args, **kwargs)
    if new == cur:
        return None
    dw = self._draft_worker
    self.topk = dw.topk = new.topk
    self.speculative_num_steps = dw.speculative_num_steps = new.steps
    self.speculative_num_draft_tokens = dw.speculative_num_draft_tokens = new.tokens
    dw.draft_attn_backend = state.draft_attn_backend
    dw.draft_runner.draft_attn_backend = state.draft_attn_backend
    dw.cuda_graph_runner = state.cuda_graph_runner
    dw.draft_extend_attn_backend = state.draft_extend_attn_backend
    if state.draft_extend_attn_backend is not None:  # the draft-extend forward reads the runner's
        dw.draft_runner.attn_backend = state.draft_extend_attn_backend
    dw.cuda_graph_runner_for_draft_extend = state.cuda_graph_runner_for_draft_extend
    if new.topk == 1:
        dw._rebuild_topk1_chain_buffers()  # asserts tokens == steps + 1 for a chain
    mr = self._target_worker.model_runner
    mr.attn_backend = state.target_attn_backend
    mr.decode_cuda_graph_runner = state.target_graph_runner
    set_spec_state(self, new, "sglang_eagle3_ext.trees.switch")
    return None


def draft_hook(original: Callable[..., Any], self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
    """Around ``EagleDraftWorker.draft``: the carried candidates are K_max wide; this cycle's
    state drafts from the first topk (``fast_topk`` sorts them, so they are its top-k)."""
    si = getattr(batch, "spec_info", None)
    p = getattr(si, "topk_p", None)
    k = int(getattr(self, "topk", 1))
    if p is not None and getattr(p, "ndim", 0) == 2 and p.shape[1] > k:
        si.topk_p = p[:, :k]
        si.topk_index = si.topk_index[:, :k]
    return original(self, batch, *args, **kwargs)


def extend_hook(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """Around the draft extends (prefill and decode): the next cycle's candidates are computed
    with topk = K_max, whatever this cycle's state (inside them topk is read only there)."""
    km = k_max()
    cur = self.topk
    if km <= cur:
        return original(self, *args, **kwargs)
    self.topk = km
    try:
        return original(self, *args, **kwargs)
    finally:
        self.topk = cur


HOOKS: dict[str, Callable[..., Any]] = {
    "max-tokens": max_tokens_hook, "alloc": alloc_hook, "headroom": headroom_hook,
    "logits": logits_rows_hook, "override": override_hook, "apply": apply_hook, "draft": draft_hook,
    "extend-prefill": extend_hook, "extend-decode": extend_hook,
}


def hook_for(role: str, target: str) -> Callable[..., Any]:
    if role == "reserve":
        return tokenizer_init_hook if target.endswith(".__init__") else reserve_hook
    return HOOKS[role]
