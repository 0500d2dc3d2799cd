"""Run in a subprocess with a patched SGLang copy first on sys.path (tests/test_patch_runtime.py).

Drives the REAL EAGLEWorkerV2.forward_batch_generation decode branch of that copy with fake
draft / verify / re-extend stand-ins (a CPU cannot run them: they need GPU attention kernels,
reference sglang-on-cpu.md 2d/A.4), then the real on_verify_complete_cpu, and prints the probes
trace as JSON.
"""

import json
import shlex
import sys
import types

import torch
from sglang.srt.runtime_context import publish
from sglang.srt.server_args import prepare_server_args

target, draft = sys.argv[1], sys.argv[2]
sa = prepare_server_args(shlex.split(
    f"--model-path {target} --speculative-algorithm EAGLE3 --speculative-draft-model-path {draft} "
    "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3 --device cpu"))
sa.resolve_once()
publish(sa, role="scheduler")

from sglang.srt.speculative import eagle_worker_v2 as ew  # noqa: E402

from sglang_eagle3_ext.runtime import probes  # noqa: E402

order = []


class VI:
    kv_loc_plan = None

    def is_verify_input(self):
        return True


class DW:
    parallel_layout = types.SimpleNamespace(tp_group=None, disable_cp=False)
    draft_runner = None

    def draft(self, batch, with_topology=False):
        order.append("draft")
        return VI()

    def _draft_extend_for_decode(self, batch, out, kv_loc_plan=None):
        order.append("extend")


def fake_verify(batch, **kw):
    order.append("verify")
    return types.SimpleNamespace(new_seq_lens=batch.seq_lens + 1)


mode = types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False)
batch = types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, seq_lens=torch.tensor([5, 7]),
                              spec_info=types.SimpleNamespace(is_verify_input=lambda: False))
w = object.__new__(ew.EAGLEWorkerV2)
w._draft_worker, w._target_worker, w.adaptive_controller = DW(), None, None
w.speculative_num_steps, w.topk = 2, 1
for a in ("req_to_token_pool", "token_to_kv_pool_allocator", "plan_stream", "plan_stream_ctx",
          "speculative_num_draft_tokens", "device"):
    setattr(w, a, None)
ew.run_eagle_verify = fake_verify
ew.EAGLEWorkerV2.forward_batch_generation(w, batch)
# the scheduler hands the CPU accept counts of that verify to the worker (0.5.12+)
w.on_verify_complete_cpu([2, 1], batch_size=2)
# a prefill through the real non-decode branch: its first statement is the patch's mark_boundary
w._forward_prefill_batch = lambda *a, **k: order.append("prefill")
prefill = types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_extend=lambda: True, is_idle=lambda: False),
                                is_extend_in_batch=False)
ew.EAGLEWorkerV2.forward_batch_generation(w, prefill)
print(json.dumps({"file": ew.__file__, "order": order, "trace": probes.trace,
                  "has_alias": getattr(ew, "_sglang_eagle3_probes", None) is not None}))
