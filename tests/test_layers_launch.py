"""`launch` names the captured layers (our convention) before anything starts, and warns when they
contradict the training layers recorded beside the draft (tiny.json). Dry runs only: nothing starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import layers


def _models(tmp_path: Path, ids, trained=None, arch="LlamaForCausalLM", n=32) -> tuple[Path, Path]:
    t, d = tmp_path / "target", tmp_path / "draft"
    t.mkdir()
    d.mkdir()
    (t / "config.json").write_text(json.dumps({"architectures": [arch], "num_hidden_layers": n,
                                               "hidden_size": 4096, "vocab_size": 128256}))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "vocab_size": 128256}
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    (d / "config.json").write_text(json.dumps(cfg))
    if trained is not None:
        (tmp_path / "tiny.json").write_text(json.dumps({"trained_on": trained}))
    return t, d


def _dry(t: Path, d: Path, capsys, *extra: str) -> tuple[int, str, str]:
    rc = cli.main(["launch", "--model", str(t), "--draft", str(d), "--steps", "2", "--topk", "1",
                   "--draft-tokens", "3", "--dry-run", "--no-sglang-check", *extra])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(layers.ENV, raising=False)


def test_dry_run_prints_capture_line_and_warns_on_recorded_training(tmp_path, capsys):
    t, d = _models(tmp_path, [3, 17, 30], trained=[2, 16, 29])
    rc, out, err = _dry(t, d, capsys)
    assert rc == 0 and "--speculative-algorithm EAGLE3" in out
    line = next(x for x in err.splitlines() if x.startswith("EAGLE-3 capture"))
    assert "outputs of decoder layers 3,17,30" in line and "loop / HF indices 4,18,31" in line
    assert "trained on 2,16,29 (recorded in" in line
    assert any(x.startswith("warning: SGLang") and "trained on outputs of layers 2, 16, 29" in x
               for x in err.splitlines()), err
    rc, out, err = _dry(t, d, capsys, "--aux-layers", "2,16,29")
    assert rc == 0 and "outputs of decoder layers 2,16,29" in err and "warning" not in err


def test_dry_run_ambiguous_ids_warn_and_defaults_do_not(tmp_path, capsys):
    t, d = _models(tmp_path, [2, 16, 29])
    rc, _, err = _dry(t, d, capsys)
    assert rc == 0 and "outputs of decoder layers 2,16,29" in err
    assert any(x.startswith("warning: the draft's ids [2, 16, 29] mean") and "vLLM" in x
               for x in err.splitlines()), err
    (tmp_path / "x").mkdir()
    t2, d2 = _models(tmp_path / "x", None)
    rc, _, err = _dry(t2, d2, capsys)
    assert rc == 0 and "from SGLang's defaults" in err and "warning" not in err


def test_no_capture_line_for_plain_decoding(tmp_path, capsys):
    t, _ = _models(tmp_path, [2, 16, 29])
    rc = cli.main(["launch", "--model", str(t), "--no-spec", "--dry-run", "--no-sglang-check"])
    cap = capsys.readouterr()
    assert rc == 0 and "EAGLE-3 capture" not in cap.err, cap.err


def test_launch_trained_on_refuses_a_contradicting_capture(tmp_path, capsys):
    """launch --trained-on: a capture that differs stops the launch (exit 2, one line) before
    anything starts; the matching one prints the line; bad syntax is exit 2 too."""
    t, d = _models(tmp_path, [3, 17, 30])
    rc, out, err = _dry(t, d, capsys, "--trained-on", "2,16,29")
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: --trained-on 2,16,29: SGLang 0.5.23 captures outputs of layers 3, 17, 30")
    assert "[2, 16, 29]" in err  # the fix
    rc, out, err = _dry(t, d, capsys, "--trained-on", "3,17,30")
    assert rc == 0 and "trained on 3,17,30 (--trained-on)" in err and "warning" not in err
    rc, out, err = _dry(t, d, capsys, "--trained-on", "2,,16")
    assert rc == 2 and "empty item" in err
