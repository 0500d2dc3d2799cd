"""A patched copy of the importable SGLang 0.5.23 really runs the probes, in order.

Fakes: only the draft / verify / re-extend bodies (they need GPU attention kernels; reference
sglang-on-cpu.md 2d); the control flow between them is SGLang's own
``EAGLEWorkerV2.forward_batch_generation`` decode branch, patched by our engine. Run twice: with
the inserted text of today and with the text patched trees carried before ``runtime/`` existed
(``from sglang_eagle3_ext import probes``): such a tree keeps recording into the one probes module
(the driver reads the trace through the new name), and ``patch status`` / ``revert`` still know it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import requires_sglang, subprocess_env

from sglang_eagle3_ext.patcher import engine, transform
from sglang_eagle3_ext.runtime.sglang_env import locate

DRIVER = Path(__file__).parent / "data" / "patcher" / "drive_v2.py"
# the probes import block as trees patched before the move carry it (transform.py at b26d707)
PRE_MOVE_PROBES = (
    "try:  # {m}: probe runtime; package absent -> every probe call is skipped\n"
    "    from sglang_eagle3_ext import probes as {a}  # {m}\n"
    "    {a}.set_spec_config(route=\"source-patch\")  # {m}\n"
    "except Exception:  # {m}\n"
    "    {a} = None  # {m}\n"
)


def _link_copy(src: Path, dst: Path, copied: tuple[str, ...] = ()) -> None:
    """The installed package as a tree of symlinks (cheap), except real copies of the files under
    ``copied``: the ones the patcher may write. It refuses a symlinked target file (issue 23,
    case 16), so the installed file is never touched either way."""
    for d, dirs, files in os.walk(src):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        rel = Path(d).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            if any((rel / f).as_posix().startswith(c) for c in copied):
                shutil.copy2(Path(d) / f, dst / rel / f)
            else:
                os.symlink(Path(d) / f, dst / rel / f)


def _tiny_configs(tmp: Path) -> tuple[Path, Path]:
    target, draft = tmp / "target", tmp / "draft"
    common = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256,
              "torch_dtype": "float32", "rms_norm_eps": 1e-6}
    for d, extra in ((target, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}),
                     (draft, {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                              "draft_vocab_size": 512,
                              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}})):
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model_type": "llama", **common, **extra}))
    return target, draft


@requires_sglang
@pytest.mark.parametrize("inserted", ["current", "pre-move"])
def test_patched_v2_decode_branch_fires_probes_in_order(tmp_path, monkeypatch, inserted):
    installed = locate()
    assert installed.version == "0.5.23"
    root = tmp_path / "site"
    _link_copy(installed.package_dir, root / "sglang", copied=("srt/speculative/", "srt/managers/"))
    # the version comes from the dist-info METADATA (the package's version.py says 0.0.0.dev0)
    for meta in installed.package_dir.parent.glob("sglang-*.dist-info"):
        _link_copy(meta, root / meta.name)
    env = locate(root)
    assert env.version == "0.5.23"
    if inserted == "pre-move":
        monkeypatch.setitem(transform._IMPORT_BLOCK, "probes", PRE_MOVE_PROBES)
    pl = engine.apply(env)
    monkeypatch.undo()  # status / revert below run with today's code
    v2 = env.path("srt/speculative/eagle_worker_v2.py")
    new_import = "from sglang_eagle3_ext.runtime import probes as _sglang_eagle3_probes"
    old_import = "from sglang_eagle3_ext import probes as _sglang_eagle3_probes"
    text = v2.read_text()
    assert (old_import in text and new_import not in text) if inserted == "pre-move" else new_import in text
    assert engine.status(env)["state"] == "patched"
    assert [f.rel for f in pl.changes] == ["srt/speculative/eagle_worker_v2.py"]
    assert not v2.is_symlink()
    assert (installed.package_dir / "srt/speculative/eagle_worker_v2.py").read_bytes() != v2.read_bytes()
    target, draft = _tiny_configs(tmp_path)
    repo = Path(__file__).resolve().parent.parent
    penv = subprocess_env(extra={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_TRACE": "1",
                                 "EAGLE3_PROFILE_EVERY": "1000"})
    penv["PYTHONPATH"] = os.pathsep.join([str(root), str(repo), penv["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, str(DRIVER), str(target), str(draft)], env=penv,
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["file"] == str(v2)  # the patched copy was imported, not the installed file
    assert res["has_alias"] and res["order"] == ["draft", "verify", "extend", "prefill"]
    trace = [tuple(t) if not isinstance(t[1], list) else (t[0], tuple(t[1])) for t in res["trace"]]
    calls = [t for t in trace if t[0] != "set_spec_config"]
    assert calls == [
        ("cycle_begin", None),
        ("phase_begin", "draft"), ("phase_end", "draft"),
        ("phase_begin", "verify"), ("phase_end", "verify"),
        ("phase_begin", "extend"), ("phase_end", "extend"),
        ("cycle_end", None),
        ("record_accept", (2, 1)),
        ("mark_boundary", "extend"),  # the prefill branch
    ]
    assert ("set_spec_config", (None, None, None, "source-patch")) in trace
    if inserted == "pre-move":  # apply again: rewritten from the pristine copy with today's text
        engine.apply(env)
        assert new_import in v2.read_text() and old_import not in v2.read_text()
        assert engine.status(env)["state"] == "patched"
    engine.revert(env)
    assert v2.read_bytes() == (installed.package_dir / "srt/speculative/eagle_worker_v2.py").read_bytes()
