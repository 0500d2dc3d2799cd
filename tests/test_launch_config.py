"""The launch split: configuration (launch_config), rules (flags), process (server), with no import
cycle, and the `launch` CLI options generated from the LaunchConfig field metadata."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext.commands import launch as launch_cmd
from sglang_eagle3_ext.serve import launch_config, server

PKG = Path(launch_config.__file__).resolve().parent


def _imported(module: str) -> set[str]:
    """Every sglang_eagle3_ext module (and top-level stdlib module) a file imports, at any depth
    (module level, functions, TYPE_CHECKING blocks), relative imports resolved."""
    tree = ast.parse((PKG / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from . import flags` / `from .server import X` / `from ..runtime import`
                parent = ["sglang_eagle3_ext", "serve"][: 3 - node.level]
                base = ".".join(parent) + (f".{node.module}" if node.module else "")
                found.add(base)
                if not node.module:
                    found.update(f"{base}.{a.name}" for a in node.names)
            else:
                found.add(node.module or "")
                found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_no_import_cycle_between_config_rules_and_process() -> None:
    flags_imports = _imported("flags")
    config_imports = _imported("launch_config")
    assert "sglang_eagle3_ext.serve.launch_config" in flags_imports  # the rules read the configuration
    assert "sglang_eagle3_ext.serve.server" not in flags_imports
    assert not {"sglang_eagle3_ext.serve.server", "sglang_eagle3_ext.serve.flags"} & config_imports
    assert not {"subprocess", "socket", "signal"} & config_imports  # pure configuration
    assert {"sglang_eagle3_ext.serve.launch_config", "sglang_eagle3_ext.serve.flags"} <= _imported("server")


@pytest.mark.parametrize("module", ["launch_config", "flags", "server"])
def test_each_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    code = (f"import sys, sglang_eagle3_ext.serve.{module}\n"
            "print(' '.join(sorted(m for m in sys.modules)))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = set(res.stdout.split())
    if module == "launch_config":  # the configuration pulls in neither the rules nor the process
        assert not {"sglang_eagle3_ext.serve.flags", "sglang_eagle3_ext.serve.server", "subprocess", "socket"} & loaded


def test_server_reexports_the_configuration_and_argv_names() -> None:
    from sglang_eagle3_ext.serve import flags

    for name in ("LaunchConfig", "load_preset", "override", "config_from_mapping", "FIELDS",
                 "list_presets", "expand", "DEFAULT_PORT", "DEFAULT_HOST", "DEFAULT_TIMEOUT"):
        assert getattr(server, name) is getattr(launch_config, name), name
    assert server.build_command is flags.build_command
    assert server.node_commands is flags.node_commands


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch")
    launch_cmd.add_arguments(p)
    return p


# Every option `launch --help` had before the options were generated from the fields, plus those
# added since (--policy-within, --trained-on).
OLD_OPTIONS = {
    "--model", "--draft", "--algorithm", "--steps", "--topk", "--draft-tokens", "--adaptive", "--policy",
    "--policy-within", "--hold", "--trees", "--no-spec",
    "--tp", "--aux-layers", "--trained-on", "--nccl", "--profile", "--profile-every", "--profile-mode", "--profile-out",
    "--host", "--port", "--log", "--timeout", "--detach", "--pid-file", "--nnodes", "--dist-init-addr",
    "--dry-run", "--no-sglang-check", "--python", "--server-module",
}


def test_cli_options_come_from_the_fields() -> None:
    p = _parser()
    options = {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}
    assert options == OLD_OPTIONS
    cli_fields = {f.metadata["cli"] for f in launch_config.CLI_FIELDS}
    assert cli_fields == OLD_OPTIONS - {"--detach", "--pid-file", "--dry-run"}
    # preset-only settings have no option
    assert {f.name for f in launch_config.FIELDS.values() if not f.metadata["cli"]} == {
        "extra_args", "env", "name", "description"}
    assert "--server-module" not in p.format_help()  # accepted, not shown


def test_cli_values_feed_override_with_types_and_negation() -> None:
    args = _parser().parse_args(["--steps", "3", "--timeout", "2.5", "--no-sglang-check", "--profile",
                                 "--aux-layers", "1,2,3", "--port", "31000"])
    values = launch_config.cli_values(args)
    assert values["steps"] == 3 and values["timeout"] == 2.5 and values["port"] == 31000
    assert values["sglang_check"] is False and values["profile"] is True
    assert values["no_spec"] is None and values["model"] is None  # not given: a preset's value stays
    cfg = launch_config.override(launch_config.LaunchConfig(no_spec=True, tp=2), **values)
    assert (cfg.steps, cfg.no_spec, cfg.tp, cfg.aux_layers, cfg.sglang_check) == (3, False, 2, "1,2,3", False)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--steps", "three"])


def test_preset_types_follow_the_annotations() -> None:
    assert set(launch_config._INT_KEYS) == {"steps", "topk", "draft_tokens", "tp", "profile_every", "port",
                                            "nnodes", "policy_within", "hold"}
    assert set(launch_config._BOOL_KEYS) == {"no_spec", "profile", "sglang_check"}
    from sglang_eagle3_ext.runtime.errors import UserError

    with pytest.raises(UserError, match="topk must be an integer"):
        launch_config.config_from_mapping({"topk": "4"})
    with pytest.raises(UserError, match="profile must be true or false"):
        launch_config.config_from_mapping({"profile": "yes"})
