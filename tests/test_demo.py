"""`sgl-eagle3 demo`: the dry run on this GPU-less machine, input errors, and the live flow.

The live flow needs a GPU SGLang server; its test swaps only that for a stand-in process (the
streaming OpenAI stand-in of tests/standin_openai.py behind SGLang's argv, which also writes the
profile record the patched SGLang would write). Everything else is real: the tiny models, the
libcst patch of a real SGLang 0.5.16 source copy, process-group launch and stop, the streaming
bench client, the profile reader and the revert (checked byte-identical).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.commands import demo

pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_dry_run_without_gpu_builds_models_and_changes_nothing(release_copy, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.setattr(demo, "gpu_name", lambda: None)
    root = release_copy("0.5.16")
    before = tree_hash(root)
    out = tmp_path / "demo"
    rc = cli.main(["demo", "--sglang-root", str(root), "--route", "patch", "--steps", "3",
                   "--out", str(out), "--acceptance", "oracle"])
    text = capsys.readouterr()
    assert rc == 0
    assert "no CUDA GPU on this machine" in text.out
    assert "would patch: srt/speculative/eagle_worker_v2.py" in text.out
    assert "--speculative-num-steps 3" in text.out and "--speculative-num-draft-tokens 4" in text.out
    assert "EAGLE3_PROFILE=1" in text.out and "SGLANG_PLUGINS=none" in text.out
    assert "[7/7] revert" in text.err
    assert tree_hash(root) == before
    assert (out / "models" / "draft" / "model.safetensors").is_file()
    summary = json.loads((out / "demo.json").read_text())
    assert summary["live"] is False and summary["expected_accept_len"] == 4.0
    assert summary["route"] == "source-patch"


def test_dry_run_partial_expects_the_chat_request(release_copy, tmp_path, capsys, monkeypatch):
    """A partial draft: the demo's bench sends one chat prompt, so its prediction is that request's
    walk (H200, 8B shape, 256 tokens, 3 steps: 3.20 measured), not the cycle average 2.96."""
    monkeypatch.setattr(demo, "gpu_name", lambda: None)
    root = release_copy("0.5.16")
    out = tmp_path / "demo"
    rc = cli.main(["demo", "--sglang-root", str(root), "--route", "plugin", "--steps", "3",
                   "--out", str(out), "--acceptance", "0.8", "--max-tokens", "256"])
    capsys.readouterr()
    assert rc == 0
    summary = json.loads((out / "demo.json").read_text())
    assert summary["expected_accept_len"] == 3.2
    assert summary["expected_accept_len_average"] == 2.955


def test_auto_route_prefers_plugin(release_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(demo, "gpu_name", lambda: "Fake GPU")
    root = release_copy("0.5.16")
    assert cli.main(["demo", "--sglang-root", str(root), "--dry-run", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr()
    assert "route: plugin" in text.err and "--dry-run" in text.out
    assert "SGLANG_PLUGINS" not in text.out


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--acceptance", "2"], ["--runs", "0"],
                                  ["--server-args", "'unclosed"]])
def test_bad_input_exits_2_before_anything(argv, tmp_path):
    from sglang_eagle3_ext.serve import releases

    out = tmp_path / "d"
    root = releases.fetch("0.5.16")
    assert cli.main(["demo", "--sglang-root", str(root), "--out", str(out), *argv]) == 2
    assert not out.exists()


def test_plugin_route_on_old_release_is_refused(tmp_path):
    from sglang_eagle3_ext.serve import releases

    root = releases.fetch("0.5.9")
    assert cli.main(["demo", "--sglang-root", str(root), "--route", "plugin",
                     "--out", str(tmp_path / "d")]) == 2


STANDIN = '''
"""Stand-in GPU server: SGLang's argv in, streaming OpenAI out, one profile record written."""
import json, os, sys, time
sys.path.insert(0, {tests!r})
from standin_openai import StandIn

argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
steps = int(argv[argv.index("--speculative-num-steps") + 1])
out = os.environ.get("EAGLE3_PROFILE_OUT")
if os.environ.get("EAGLE3_PROFILE") == "1" and out:
    ph = {{k: {{"mean_ms": v, "p50_ms": v, "p90_ms": v}} for k, v in
          (("draft", 1.0), ("verify", 1.5), ("extend", 0.4), ("other", 0.1), ("cycle", 3.0))}}
    rec = {{"schema": "eagle3_prof/1", "window": 1, "cycles": 100, "requests": 100,
           "accepted_drafts": 100 * steps, "tokens": 100 * (steps + 1), "accept_len": steps + 1.0,
           "accept_hist": {{str(steps): 100}}, "per_position": [1.0] * steps, "phases": ph,
           "eff_tok_s": 1000.0, "mode": "wall", "route": "source-patch", "sglang_version": "0.5.16",
           "spec": {{"steps": steps, "topk": 1, "draft_tokens": steps + 1}}, "rank": 0,
           "tp_size": 1, "time": "2026-11-29T00:00:00+0000"}}
    with open(out, "a") as fh:
        fh.write(json.dumps(rec) + "\\n")
print("The server is fired up and ready to roll!", flush=True)
StandIn(port=port, tokens_per_chunk=steps + 1, interval_s=0.003, spec="metrics").start()
while True:
    time.sleep(3600)
'''


def test_live_flow_patches_launches_benches_profiles_stops_and_reverts(
        release_copy, tmp_path, capsys, monkeypatch):
    """Only the GPU server is a stand-in; the patch is applied to (and reverted from) a real tree."""
    from sglang_eagle3_ext.serve import server as srv

    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "demo_standin.py").write_text(STANDIN.format(tests=str(TESTS)))
    monkeypatch.setenv("PYTHONPATH", str(mod_dir))
    real_cfg = srv.LaunchConfig

    def cfg_with_standin(**kw):
        return real_cfg(server_module="demo_standin", python=sys.executable, **kw)

    monkeypatch.setattr(srv, "LaunchConfig", cfg_with_standin)
    monkeypatch.setattr(demo, "gpu_name", lambda: "Fake GPU")
    root = release_copy("0.5.16")
    before = tree_hash(root)
    seen: dict[str, bool] = {}
    real_start = srv.Server.start

    def start_and_look(self, *a, **k):  # the patch must be in place while the server runs
        seen["patched"] = b"sglang-eagle3-ext" in (
            root / "sglang/srt/speculative/eagle_worker_v2.py").read_bytes()
        return real_start(self, *a, **k)

    monkeypatch.setattr(srv.Server, "start", start_and_look)
    out = tmp_path / "demo"
    rc = cli.main(["demo", "--sglang-root", str(root), "--route", "patch", "--steps", "2",
                   "--out", str(out), "--runs", "2", "--max-tokens", "40", "--port",
                   str(_free_port()), "--timeout", "60"])
    text = capsys.readouterr()
    assert rc == 0, text.out + text.err
    assert seen["patched"] is True
    assert tree_hash(root) == before, "revert must leave the tree byte-identical"
    assert "reverted: srt/speculative/eagle_worker_v2.py" in text.out
    summary = json.loads((out / "demo.json").read_text())
    assert summary["live"] is True
    assert summary["profile_accept_len"] == pytest.approx(3.0)
    assert summary["sglang_accept_len"] == pytest.approx(40 / 13, rel=0.01)  # stand-in: ceil(39/3)
    assert (out / "bench.json").is_file() and (out / "server.log").is_file()
    assert "TOTAL cycle" in text.out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
