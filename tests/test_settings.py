"""settings.py: every variable we read or write declared once; no SGL_* name (SGLang rewrites and
warns about that prefix); old SGL_EAGLE3_* names adopted once with a note (defect 9 of issue 18)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from sglang_eagle3_ext.runtime import settings


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
    doc = (REPO / "docs" / "reference" / "architecture.md").read_text()
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


_OUR_NAME = re.compile(r"\b(?:SGLANG_EAGLE3|EAGLE3_PROFILE)(?:_[A-Z0-9]+)*\b")
_READERS = ("get", "getenv", "pop", "setdefault")


def _literal_names(node: object) -> list[str]:
    import ast

    texts = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]  # type: ignore[arg-type]
    return [m.group(0) for t in texts for m in _OUR_NAME.finditer(t)]


def test_every_variable_the_code_names_is_declared_and_read_through_settings():
    """AST scan of sglang_eagle3_ext/: (1) every SGLANG_EAGLE3_* / EAGLE3_PROFILE* name in a string
    (a read, a write, a message) is declared in settings.py; (2) no module but settings.py reads
    one of ours by hand (``os.environ.get("EAGLE3_...")``, ``os.getenv``, ``env["..."]`` loads):
    they all go through a ``Setting``. A new undeclared name, or a new hand-parsed one, fails."""
    import ast

    declared = set(settings.BY_NAME) | {s.old for s in settings.ALL if s.old}
    undeclared, by_hand = [], []
    for p in sorted((REPO / "sglang_eagle3_ext").rglob("*.py")):
        rel = p.relative_to(REPO)
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for name in _literal_names(tree):
            if name not in declared and name != "SGLANG_EAGLE3":  # the bare prefix (doctor's filter)
                undeclared.append(f"{rel}: {name}")
        if p.name == "settings.py":
            continue
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and node.args:
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr in _READERS or \
                        isinstance(f, ast.Name) and f.id == "getenv":
                    key = node.args[0]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            if key is not None and _literal_names(key):
                by_hand.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert undeclared == [], "declare these in sglang_eagle3_ext/runtime/settings.py"
    assert by_hand == [], "read these through their settings.Setting (get / read / is_set)"


def test_probe_parsers_share_the_declarations(capsys):
    """probes.settings() / metrics.settings() / hookplan.switches() read through these Settings:
    the same spellings are accepted, the same bad values fall back with one 'is not ...' line."""
    from sglang_eagle3_ext.runtime import probes
    from sglang_eagle3_ext.runtime.plugin import hookplan
    from sglang_eagle3_ext.runtime.probes import metrics

    env = {"EAGLE3_PROFILE": "yes", "EAGLE3_PROFILE_MODE": " WALL ", "EAGLE3_PROFILE_TOGGLE": "usr2",
           "EAGLE3_PROFILE_SPEC": "3,?,4", "EAGLE3_PROFILE_DEFER": "", "EAGLE3_PROFILE_OUT": "/tmp/p.jsonl"}
    s = probes.settings(env)
    assert (s["enabled"], s["mode"], s["toggle"], s["defer"], s["out"]) == \
        (True, "wall", "SIGUSR2", True, "/tmp/p.jsonl")
    assert s["spec"] == {"steps": 3, "topk": None, "draft_tokens": 4}
    assert settings.PROFILE_MODE.read({"EAGLE3_PROFILE_MODE": "gpu"})[1] == \
        "EAGLE3_PROFILE_MODE='gpu' is not one of auto, events, wall, sync; using 'auto'"
    assert settings.PROFILE_SPEC.read({"EAGLE3_PROFILE_SPEC": "a,b,c"})[1].endswith("; ignored")
    for bad in ("0", "-3", "inf", "nan", "fast"):
        assert settings.PROFILE_BASELINE_TPS.read({"EAGLE3_PROFILE_BASELINE_TPS": bad})[0] is None
    # off: bad values are not worth a line (nothing reads them)
    probes.settings({"EAGLE3_PROFILE_EVERY": "zero"})
    metrics.settings({"EAGLE3_PROFILE_BASELINE_TPS": "fast"})
    assert capsys.readouterr().err == ""
    assert metrics.settings({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_METRICS": "on",
                             "EAGLE3_PROFILE_BASELINE_TPS": "88.5"}) == {"on": True, "baseline_tps": 88.5}
    assert metrics.settings({"EAGLE3_PROFILE_METRICS": "1"})["on"] is False  # needs the probes too
    assert hookplan.switches({"EAGLE3_PROFILE": "off", "SGLANG_EAGLE3_NCCL": " nvls ",
                            "SGLANG_EAGLE3_AUX_LAYERS": ""}) == {"profile": False, "nccl": "nvls",
                                                                 "aux_layers": None, "step_control": None,
                                                                 "trees": False}
