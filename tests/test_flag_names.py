"""SGLang's and bench_serving's flag names: accepted as the same options as ours, named in --help
and docs/guide/launch.md, and an SGLang name we do not take answered with one line. The names
are checked against the installed SGLang 0.5.23's own sources (server fields, bench_serving's
parser), so the table cannot drift from what SGLang calls them. Nothing is faked."""

from __future__ import annotations

import argparse

import pytest
from conftest import REPO
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.commands import flagnames


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command parser by its scope name ("launch", "layers check", ...)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, scope: str) -> None:
        found[scope] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{scope} {name}".strip())

    walk(cli.build_parser(), "")
    return found


@pytest.fixture(scope="module")
def parsers():
    return _parsers()


@pytest.fixture()
def models(tmp_path):
    return (str(write_model(tmp_path / "target", "LlamaForCausalLM")),
            str(write_model(tmp_path / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1,
                            draft_vocab_size=512)))


def test_every_alias_lands_on_our_own_action(parsers):
    for scope, table in flagnames.ALIASES.items():
        p = parsers[scope]
        for ours, theirs in table.items():
            action = p._option_string_actions[ours]
            for name in theirs:
                assert p._option_string_actions.get(name) is action, (scope, name)
                assert name in p.format_help(), (scope, name)  # --help shows SGLang's name


@pytest.mark.parametrize("scope", ["launch", "scan", "layers check"])
def test_server_names_are_sglangs_own(scope):
    """Each server-side alias is a flag of the installed SGLang (read from its sources)."""
    server = flagnames._release_flags("server")
    assert "--speculative-num-steps" in server and "--mem-fraction-static" in server  # the reader works
    for name in flagnames.names_of(scope):
        if name != "--plan":
            assert name in server, name


def test_bench_names_are_bench_servings_own():
    bench = flagnames._release_flags("bench")
    assert "--num-prompts" in bench and "--base-url" in bench
    for name in flagnames.names_of("bench"):
        assert name in bench, name
    for name in flagnames.EXPLAIN["bench"]:
        assert name in bench, name


def test_explained_server_names_are_sglangs_own():
    server = flagnames._release_flags("server")
    for scope in ("launch", "scan", "demo", "sweep"):
        for name in flagnames.EXPLAIN[scope]:
            assert name in server, (scope, name)


def test_bench_takes_bench_servings_spelling(parsers):
    p = cli.build_parser()
    a = p.parse_args(["bench", "--base-url", "http://127.0.0.1:1", "--num-prompts", "7", "--output-file", "o.json",
                      "--dataset-path", "p.txt", "--warmup-requests", "2", "--sharegpt-output-len", "64",
                      "--served-model-name", "m"])
    b = p.parse_args(["bench", "--url", "http://127.0.0.1:1", "--num-requests", "7", "--out", "o.json",
                      "--prompts", "p.txt", "--warmup", "2", "--output-len", "64", "--model", "m"])
    keep = lambda ns: {k: v for k, v in vars(ns).items() if k != "_run"}  # noqa: E731
    assert keep(a) == keep(b)


def _launch(capsys, argv) -> tuple[int, str, str]:
    rc = cli.main(argv)
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_launch_with_sglangs_names_prints_the_same_command(models, capsys):
    target, draft = models
    ours = ["launch", "--model", target, "--draft", draft, "--algorithm", "EAGLE3", "--steps", "3", "--topk", "1",
            "--draft-tokens", "4", "--tp", "1", "--no-sglang-check", "--dry-run"]
    theirs = ["launch", "--model-path", target, "--speculative-draft-model-path", draft, "--speculative-algorithm",
              "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "4", "--tp-size", "1", "--no-sglang-check", "--plan"]
    a, b = _launch(capsys, ours), _launch(capsys, theirs)
    assert a[0] == b[0] == 0, (a, b)
    assert a[1] == b[1] and "--speculative-num-steps 3" in a[1]


def test_sglangs_names_after_a_preset_name(capsys, tmp_path, monkeypatch):
    """`launch tiny --speculative-num-steps 3`: the options after the preset are parsed again
    (split_preset_words), with the same names."""
    monkeypatch.setenv("SGLANG_EAGLE3_TINY", str(tmp_path))
    write_model(tmp_path / "target", "LlamaForCausalLM")
    write_model(tmp_path / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    rc, out, err = _launch(capsys, ["launch", "tiny", "--speculative-num-steps", "3",
                                    "--speculative-num-draft-tokens", "4", "--no-sglang-check", "--dry-run"])
    assert rc == 0, err
    assert "--speculative-num-steps 3" in out and "--speculative-num-draft-tokens 4" in out


def test_sweep_dry_run_is_plan(parsers, capsys):
    a = cli.build_parser().parse_args(["sweep", "x.yaml", "--dry-run"])
    assert a.plan is True
    assert "--dry-run, --plan" in parsers["sweep"].format_help()
    for scope in ("launch", "scan", "demo", "patch apply", "sweep"):  # one word everywhere
        assert "--dry-run" in parsers[scope]._option_string_actions, scope
        assert "--plan" in parsers[scope]._option_string_actions, scope


@pytest.mark.parametrize("argv,says", [
    (["bench", "--url", "http://127.0.0.1:1", "--backend", "sglang"], "--api generate"),
    (["bench", "--base-url", "http://127.0.0.1:1", "--dataset-name", "sharegpt"], "--prompts FILE"),
    (["bench", "--host", "127.0.0.1", "--port", "30000"], "--url http://HOST:PORT"),
    (["bench", "--url", "http://127.0.0.1:1", "--goodput", "ttft:100"], "--slo ttft=MS"),
    (["bench", "--url", "http://127.0.0.1:1", "--random-output-len=64"], "sgl-eagle3 traffic"),
    (["bench", "--url", "http://127.0.0.1:1", "--disable-ignore-eos"], "leave --ignore-eos out"),
    (["bench", "--url", "http://127.0.0.1:1", "--gsp-num-groups", "4"], "bench_serving's option"),
    (["scan", "--speculative-num-steps", "3"], "--steps LIST"),
    (["scan", "--speculative-eagle-topk", "4"], "topk 1"),
    (["launch", "--model", "m", "--mem-fraction-static", "0.8", "--dry-run"], "give it after `--`"),
    (["launch", "--model", "m", "--speculative-adaptive"], "--adaptive FILE"),
    (["demo", "--model-path", "m"], "builds and runs its own tiny models"),
    (["demo", "--mem-fraction-static", "0.5"], "--server-args"),
    (["sweep", "x.yaml", "--speculative-num-steps", "3"], "matrix: {steps: [1, 2, 3]}"),
    (["sweep", "x.yaml", "--mem-fraction-static", "0.8"], "launch: {extra_args: [--mem-fraction-static, ...]}"),
    (["launch", "tiny", "--mem-fraction-static", "0.8", "--dry-run"], "give it after `--`"),
])
def test_a_name_we_do_not_take_gets_one_line(argv, says, capsys):
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err
    assert "unrecognized" not in err


def test_an_unknown_name_of_nobody_keeps_argparses_message(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--url", "http://127.0.0.1:1", "--no-such-option"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_a_known_name_beside_an_unknown_one_names_both(capsys):
    assert cli.main(["bench", "--url", "http://x:1", "--backend", "sglang", "--zzz"]) == 2
    err = capsys.readouterr().err
    assert "--api generate" in err and "also not an option here: --zzz" in err


def test_sglang_flags_after_dashes_still_go_to_sglang(models, capsys):
    target, _ = models
    rc, out, err = _launch(capsys, ["launch", "--model", target, "--no-spec", "--no-sglang-check", "--dry-run",
                                    "--", "--mem-fraction-static", "0.8"])
    assert rc == 0, err
    assert "--mem-fraction-static 0.8" in out


def test_launch_guide_lists_every_name():
    text = (REPO / "docs/guide/launch.md").read_text()
    section = text.split("## SGLang's flag names", 1)[1]
    for scope in flagnames.ALIASES:
        for name, ours in flagnames.names_of(scope).items():
            assert f"`{name}`" in section and f"`{ours}`" in section, (scope, name)


def test_a_bare_parse_keeps_argparses_errors(capsys):
    """Code that parses with the parser itself (not through cli.main) sees argparse's exit 2."""
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["bench", "--host", "h"])
    assert exc.value.code == 2 and "--url" in capsys.readouterr().err


def test_unknown_words_after_a_preset_name_keep_argparses_message(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["launch", "tiny", "--no-such-option", "--dry-run"])
    assert exc.value.code == 2 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err
