"""bench end to end against a real SGLang 0.5.23 server on CPU (non-speculative: EAGLE needs a GPU
attention backend, reference sglang-on-cpu.md 2d), started through server.Server on the built-in
tiny target (random weights). Slow: ~40 s of server start-up.

Only the sgl_kernel probe stub (tests/shims) stands in for the CUDA kernels; no stubbed op is
called on this path. What it proves: the real OpenAI streaming endpoint gives exact token counts
(usage), per-chunk usage for the first chunk (continuous_usage_stats), honours max_tokens with
ignore_eos, ignores ``return_spec_tokens_details`` on a non-spec server, and the arithmetic holds.
"""

from __future__ import annotations

import socket

import pytest
from conftest import requires_sglang, subprocess_env

from sglang_eagle3_ext.measure import bench
from sglang_eagle3_ext.serve import server

pytestmark = [pytest.mark.slow, pytest.mark.sglang, requires_sglang]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cpu_server(tmp_path_factory):
    from sglang_eagle3_ext import tiny

    root = tmp_path_factory.mktemp("tiny")
    models = tiny.build(root / "models", acceptance="random")
    cfg = server.LaunchConfig(
        model=str(models.target), no_spec=True, host="127.0.0.1", port=_free_port(),
        log=str(root / "server.log"), timeout=240, sglang_check=False,
        extra_args=["--device", "cpu", "--mem-fraction-static", "0.05", "--max-total-tokens", "2048"],
        env={"SGLANG_USE_CPU_ENGINE": "1"})
    srv = server.Server(cfg, environ=subprocess_env(sgl_kernel=True))
    try:
        srv.start(wait=True)
    except server.ServerFailed as exc:
        pytest.fail(f"{exc}\n" + "\n".join(exc.log_tail[-20:]))
    yield srv
    srv.stop()


def test_bench_real_sglang_cpu_server(cpu_server):
    n = 24
    res = bench.run_bench(bench.BenchOptions(url=cpu_server.url, runs=2, warmup=1, max_tokens=n,
                                             ignore_eos=True, label="tiny cpu no-spec"))
    s = res["summary"]
    assert s["ok_runs"] == 2 and s["failed_requests"] == 0, res["errors"]
    assert s["completion_tokens"] == 2 * n
    assert s["accept_length"] is None and s["accept_source"] == "none"
    for run in res["runs"]:
        (q,) = run["requests"]
        assert q["completion_tokens"] == n and q["finish_reason"] == "length"
        assert q["prompt_tokens"] and q["prompt_tokens"] > 10   # the chat-templated B-tree prompt
        assert q["first_tokens_exact"] and q["first_chunk_tokens"] >= 1
        assert 0 < q["ttft_s"] < q["last_token_s"]
        exp = (n - q["first_chunk_tokens"]) / (q["last_token_s"] - q["ttft_s"])
        assert q["decode_tok_s"] == pytest.approx(exp)
        assert q["e2e_tok_s"] == pytest.approx(n / q["last_token_s"])
        # (no e2e < decode check: with a fast first chunk on a loaded CPU, e2e can exceed decode)
