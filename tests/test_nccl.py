"""NCCL presets: data in launch/nccl.yaml, applied without overriding a user's variable."""

from __future__ import annotations

import re

import pytest

from sglang_eagle3_ext.runtime import nccl
from sglang_eagle3_ext.runtime.errors import UserError


def test_yaml_holds_the_seed_preset():
    presets = nccl.load_presets()
    assert presets["tuned"] == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"}
    assert set(presets) >= {"tuned", "debug", "none"} and presets["none"] == {}
    assert all(nccl.describe_presets()[name] for name in presets)  # every preset says why


def test_applied_when_unset_kept_when_user_set_and_effective_reported():
    env = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL", "NCCL_IB_DISABLE": "1", "PATH": "/bin"}
    report = nccl.apply_preset("tuned", environ=env)
    assert report.applied == {"NCCL_P2P_LEVEL": "SYS"}
    assert report.already == {"NCCL_PROTO": "LL"}
    assert report.kept == {"NCCL_ALGO": ("Tree", "Ring")}
    assert env["NCCL_ALGO"] == "Tree" and env["NCCL_P2P_LEVEL"] == "SYS"
    assert report.effective == {"NCCL_ALGO": "Tree", "NCCL_IB_DISABLE": "1",
                                "NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    assert "NCCL_ALGO" in report.interactions  # SGLang's deterministic mode rewrites it
    text = "\n".join(report.lines())
    assert "kept NCCL_ALGO=Tree" in text and "applied NCCL_P2P_LEVEL=SYS" in text
    assert "effective NCCL env: NCCL_ALGO=Tree NCCL_IB_DISABLE=1 NCCL_P2P_LEVEL=SYS NCCL_PROTO=LL" in text
    assert report.to_dict()["kept"] == {"NCCL_ALGO": {"user": "Tree", "preset": "Ring"}}


def test_empty_value_counts_as_unset_and_none_preset_changes_nothing():
    env = {"NCCL_PROTO": ""}
    assert nccl.apply_preset("tuned", environ=env).applied["NCCL_PROTO"] == "LL"
    env2 = {"NCCL_DEBUG": "WARN"}
    report = nccl.apply_preset("none", environ=env2)
    assert env2 == {"NCCL_DEBUG": "WARN"} and report.applied == {} and report.effective == env2


def test_default_environ_is_os_environ(monkeypatch):
    for var in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    report = nccl.apply_preset("tuned")
    import os

    assert os.environ["NCCL_PROTO"] == "LL" and os.environ["NCCL_ALGO"] == "Tree"
    assert set(report.applied) == {"NCCL_PROTO", "NCCL_P2P_LEVEL"}


def test_unknown_preset_is_a_user_error_listing_the_known_ones():
    env: dict[str, str] = {}
    with pytest.raises(UserError) as exc:
        nccl.apply_preset("fast", environ=env)
    assert exc.value.exit_code == 2 and "known: debug, none, tuned" in str(exc.value)
    assert env == {}  # nothing changed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("presets: [1, 2]\n", "top-level 'presets:' mapping"),
        ("presets:\n  x:\n    env:\n      PATH: /tmp\n", "not an NCCL_* variable"),
        ("presets:\n  x:\n    env:\n      NCCL_PROTO: [LL]\n", "scalar value"),
        ("presets: {x: {env: [1]}}\n", "needs an 'env:' mapping"),
        ("presets: {\n", "not valid YAML"),
    ],
)
def test_bad_preset_files_are_user_errors(tmp_path, text, message):
    f = tmp_path / "nccl.yaml"
    f.write_text(text)
    with pytest.raises(UserError, match=re.escape(message)):
        nccl.load_presets(f)


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        nccl.load_presets(tmp_path / "nope.yaml")


def test_custom_file_values_become_strings(tmp_path):
    f = tmp_path / "n.yaml"
    f.write_text("presets:\n  mine:\n    env:\n      NCCL_MIN_NCHANNELS: 4\n")
    assert nccl.preset_env("mine", f) == {"NCCL_MIN_NCHANNELS": "4"}
