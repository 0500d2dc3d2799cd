"""settings.py: every variable we read or write declared once; no SGL_* name (SGLang rewrites and
warns about that prefix); old SGL_EAGLE3_* names adopted once with a note (defect 9 of issue 18)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from sglang_eagle3_ext import settings


def test_no_sgl_prefixed_variable_in_code_presets_or_docs():
    """The SGL_ prefix appears only as the old names settings.py maps (and the test-only
    SGL_KERNEL_STUB path name is not an env variable)."""
    hits = []
    for folder in ("sglang_eagle3_ext", "launch", "docs", "examples", "tools", "tests"):
        for p in (REPO / folder).rglob("*"):
            if not p.is_file() or p.suffix not in (".py", ".yaml", ".md", ".sh") or "data" in p.parts:
                continue
            if p.name in ("settings.py", "test_settings.py", "architecture.md", "ci_env.sh"):  # old-name maps
                continue
            for m in re.finditer(r"\bSGL_[A-Z0-9_]+", p.read_text(encoding="utf-8", errors="replace")):
                if m.group(0) != "SGL_KERNEL_STUB":
                    hits.append(f"{p.relative_to(REPO)}: {m.group(0)}")
    assert hits == []


def test_sglang_ignores_our_prefix():
    """Real SGLang 0.5.23 source: the rewrite touches SGL_* only, so SGLANG_EAGLE3_* stays quiet."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    src = (Path(next(iter(spec.submodule_search_locations))) / "srt" / "environ.py").read_text()
    assert 'key.startswith("SGL_")' in src
    assert not any(s.name.startswith("SGL_") for s in settings.ALL)


def test_every_setting_documented():
    doc = (REPO / "docs" / "architecture.md").read_text()
    for s in settings.ALL:
        assert f"`{s.name}`" in doc, s.name


def test_typed_read_with_fallback():
    assert settings.PROFILE_EVERY.read({"EAGLE3_PROFILE_EVERY": "25"}) == (25, None)
    value, problem = settings.PROFILE_EVERY.read({"EAGLE3_PROFILE_EVERY": "abc"})
    assert value == 100 and "EAGLE3_PROFILE_EVERY='abc'" in problem
    assert settings.PROFILE_IDLE_MS.read({"EAGLE3_PROFILE_IDLE_MS": "-1"})[0] == 200.0
    assert settings.PROFILE.get({"EAGLE3_PROFILE": "0"}) is False
    assert settings.PROFILE.get({"EAGLE3_PROFILE": "1"}) is True
    assert settings.CACHE.get({"SGLANG_EAGLE3_CACHE": "~/x"}) == Path("~/x").expanduser()


def test_old_name_adopted_once_and_removed(capsys):
    env = {"SGL_EAGLE3_TINY": "/models/tiny"}
    settings._noted.discard("SGL_EAGLE3_TINY")
    assert settings.adopt_old_names(env) == ["SGL_EAGLE3_TINY"]
    assert env == {"SGLANG_EAGLE3_TINY": "/models/tiny"}
    assert "SGL_EAGLE3_TINY is deprecated" in capsys.readouterr().err


def test_old_tiny_name_still_drives_the_preset_and_never_reaches_sglang(tmp_path):
    """`launch tiny --dry-run` with only the old name set: the preset expands from it, the note is
    printed once, and the printed child environment has no SGL_* variable."""
    for sub in ("target", "draft"):
        (tmp_path / sub).mkdir()
    (tmp_path / "target" / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}')
    (tmp_path / "draft" / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}')
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGL_", "SGLANG_EAGLE3_"))}
    env["SGL_EAGLE3_TINY"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "launch", "tiny", "--dry-run",
                        "--no-sglang-check"], capture_output=True, text=True, env=env, timeout=120)
    assert r.stderr.count("SGL_EAGLE3_TINY is deprecated") == 1, r.stderr
    assert f"{tmp_path}/target" in r.stdout, r.stdout + r.stderr
    assert "SGL_" not in r.stdout
