"""sglang_env + `doctor` against the real source of every pinned SGLang release."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import requires_sglang

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate, parse_version
from sglang_eagle3_ext.serve import releases

# Expected from the version map (section 1 and 2.1), not from our own code.
EXPECTED = {
    "0.4.10.post2": (["V1b"], False, False),
    "0.5.3.post2": (["V1c", "V2-beta"], False, False),
    "0.5.9": (["V1c", "V2a"], False, False),
    "0.5.12.post1": (["V1c", "V2a"], True, True),
    "0.5.13": (["V2b"], True, True),
    "0.5.16": (["V2c"], True, True),
    "0.5.19": (["V2c"], True, True),
    "0.5.23": (["V2c"], True, True),
}


@pytest.mark.parametrize("version", releases.PINNED)
def test_doctor_json_reports_version_and_family(version):
    root = releases.fetch(version)
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext", "doctor", "--json", "--sglang-root", str(root)],
        capture_output=True, text=True, check=True,
    )
    info = json.loads(proc.stdout)
    families, plugins, registry = EXPECTED[version]
    assert info["sglang"]["version"] == version
    assert info["sglang"]["families"] == families
    assert info["sglang"]["has_plugins"] is plugins
    assert info["sglang"]["has_spec_registry"] is registry
    assert info["sglang"]["routes"] == {"source-patch": True, "plugin": plugins}


def test_doctor_human_output_names_family():
    root = releases.fetch("0.5.9")
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext", "doctor", "--sglang-root", str(root)],
        capture_output=True, text=True, check=True,
    )
    assert "SGLang 0.5.9" in proc.stdout
    assert "V1c, V2a" in proc.stdout


def test_bad_root_is_one_clear_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext", "doctor", "--sglang-root", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2  # a bad path given on the command line (docs/reference/architecture.md)
    assert "no sglang/srt/" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_root_may_be_the_package_folder_itself():
    root = releases.fetch("0.5.23")
    assert locate(root / "sglang").version == "0.5.23"


@pytest.mark.parametrize(
    "a,b",
    [("0.5.12.post1", "0.5.12"), ("0.5.13", "0.5.12.post1"), ("0.5.0", "0.5.0rc0"), ("0.5.10", "0.5.9")],
)
def test_version_order(a, b):
    assert parse_version(a) > parse_version(b)


def test_unreadable_version():
    with pytest.raises(UserError):
        parse_version("banana")


@requires_sglang
def test_doctor_says_which_route_records(tmp_path):
    """Installed SGLang 0.5.23, unpatched: with EAGLE3_PROFILE=1 the plugin route records."""
    import os

    env = dict(os.environ, EAGLE3_PROFILE="1", SGLANG_EAGLE3_NCCL="tuned")
    proc = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "doctor"],
                          capture_output=True, text=True, check=True, env=env, cwd=tmp_path)
    assert "source patch: not patched" in proc.stdout
    assert "probes recorded by: plugin" in proc.stdout
    assert "NCCL preset tuned" in proc.stdout
