"""A plain (non-editable) wheel install carries the data folders and the plugin entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from conftest import REPO

from sglang_eagle3_ext.serve import releases


def test_wheel_carries_patches_presets_and_entry_point(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(REPO)], check=True, cwd=tmp_path,
                   capture_output=True)
    wheel = next((tmp_path / "dist").glob("sglang_eagle3_ext-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_eagle3_ext/_data/patches/v2.yaml" in names
    assert "sglang_eagle3_ext/_data/launch/nccl.yaml" in names
    ep = next(n for n in names if n.endswith("entry_points.txt"))
    eps = zipfile.ZipFile(wheel).read(ep).decode()
    assert "sglang.srt.plugins" in eps and "sglang_eagle3_ext.runtime.plugin:register" in eps
    # the inside-SGLang package and the old names' aliases travel in the wheel
    assert {"sglang_eagle3_ext/runtime/plugin/__init__.py", "sglang_eagle3_ext/runtime/probes/tree.py",
            "sglang_eagle3_ext/_aliases.py", "sglang_eagle3_ext/probes.py", "sglang_eagle3_ext/layers.py",
            "sglang_eagle3_ext/plugin.py", "sglang_eagle3_ext/runtime/plugin/hookplan.py",
            "sglang_eagle3_ext/tiny/paths.py", "sglang_eagle3_ext/tune/scan.py"} <= set(names)
    # every package of the tree is in the wheel (tiny/ was missing from the list once)
    pkgs = {str(p.parent.relative_to(REPO)) for p in (REPO / "sglang_eagle3_ext").rglob("__init__.py")}
    assert pkgs <= {n.rsplit("/", 1)[0] for n in names}, pkgs - {n.rsplit("/", 1)[0] for n in names}
    # and nothing that is no longer in the tree (a stale build/ folder once carried runtime/plugin.py)
    code = [n for n in names if n.startswith("sglang_eagle3_ext/") and n.endswith(".py") and "/_data/" not in n]
    assert [n for n in code if not (REPO / n).is_file()] == []

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    code = ("import sglang_eagle3_ext.runtime.resources as r, pathlib, sys;"
            "p = r.data_dir('patches'); assert '_data' in str(p), p;"
            "assert (p / 'v2.yaml').is_file() and (r.data_dir('launch') / 'tiny.yaml').is_file()")
    # -I: isolated mode, so the checkout's own package cannot shadow the installed copy
    subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}"],
                   check=True, cwd=tmp_path, env=env)
    proc = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path.insert(0, {str(site)!r}); from sglang_eagle3_ext.cli import main; "
         f"sys.exit(main(['patch', 'apply', '--dry-run', '--sglang-root', {str(releases.fetch('0.5.16'))!r}]))"],
        cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "probes-v2c" in proc.stdout
    # an install's entry point from before the move still loads the one plugin module
    proc = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path.insert(0, {str(site)!r}); import importlib.metadata as m; "
         "import sglang_eagle3_ext.runtime.plugin as p; "
         "assert m.EntryPoint('e', 'sglang_eagle3_ext.plugin:register', 'g').load() is p.register"],
        cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
