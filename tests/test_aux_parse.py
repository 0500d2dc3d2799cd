"""One aux-layer parser (layers.parse_layers) behind patch, launch, plugin and layers check,
with count/range checks where the target/draft configs are known (defect 7 of issue 18)."""

from __future__ import annotations

import logging

import pytest
from test_launch import model_env, no_popen, run_cli  # noqa: F401 - fixtures

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import layers, plugin
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.plugin import hookplan, procstate


@pytest.mark.parametrize("bad,msg", [
    ("1,,2", "empty item"), ("1,2,", "empty item"), (",1,2", "empty item"), ("-1,2,30", "write 'emb'"),
    ("2,2,3", "twice"), ("x,1,2", "not a layer"), ("", "no layers"), ("[]", "no layers"),
])
def test_parse_layers_is_strict(bad, msg):
    with pytest.raises(UserError, match=msg) as e:
        layers.parse_layers(bad)
    assert e.value.exit_code == 2


def test_parse_layers_accepts_the_usual_spellings():
    assert layers.parse_layers(" 2, 30 ,58 ") == [2, 30, 58]
    assert layers.parse_layers("[2, 30, 58]") == [2, 30, 58]
    assert layers.parse_layers("emb,1,2") == ["emb", 1, 2]
    assert layers.parse_layers("2 30 58") == [2, 30, 58]


@pytest.mark.parametrize("value,msg", [
    ("1,,2", "empty item"), ("1,2", "names 2 layer"), ("0,1,99999", "layer 99999 does not exist"),
    ("-1,2,30", "write 'emb'"),
])
def test_launch_refuses_bad_aux_layers_before_start(model_env, capsys, no_popen, value, msg):  # noqa: F811
    rc, _, err = run_cli(["launch", "kimi-k25-eagle3", f"--aux-layers={value}", "--no-sglang-check",
                          "--dry-run"], capsys)
    assert rc == 2 and msg in err, err


def test_launch_accepts_good_aux_layers(model_env, capsys, no_popen):  # noqa: F811
    rc, out, _ = run_cli(["launch", "kimi-k25-eagle3", "--aux-layers", "1, 29,59", "--no-sglang-check",
                          "--dry-run"], capsys)
    assert rc == 0 and "SGLANG_EAGLE3_AUX_LAYERS=1,29,59" in out


@pytest.mark.parametrize("value,msg", [("-1,2,30", "write 'emb'"), ("1,,2", "empty item")])
def test_patch_apply_refuses_with_the_same_parser(release_copy, capsys, value, msg):
    root = release_copy("0.5.23")
    rc = cli.main(["patch", "apply", "--sglang-root", str(root), f"--aux-layers={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err, err
    assert not (root / "sglang" / ".sglang-eagle3-ext").exists()


def test_patch_apply_normalises_the_value(release_copy, capsys):
    root = release_copy("0.5.23")
    assert cli.main(["patch", "apply", "--sglang-root", str(root), "--aux-layers", "[2, 30, 58]",
                     "--dry-run"]) == 0
    assert "aux layers 2,30,58" in capsys.readouterr().out


def test_plugin_logs_a_bad_value_once_and_keeps_the_hook_off(monkeypatch, caplog):
    """The plugin runs inside SGLang: a bad SGLANG_EAGLE3_AUX_LAYERS is logged, never raised."""
    monkeypatch.setenv(procstate.ENV_AUX, "1,,2")
    seen = {}
    monkeypatch.setattr(plugin, "_process_role", lambda: "scheduler")
    monkeypatch.setattr(hookplan, "plan_hooks", lambda env, **kw: seen.update(kw) or hookplan.Plan('0.5.23'))
    monkeypatch.setattr(procstate._S, "role", None)
    with caplog.at_level(logging.ERROR):
        plugin._register(hookplan.switches())
    assert seen["aux"] is False and "empty item" in caplog.text
