"""Aux-layer conventions, per-release conversion, `layers check`, and the runtime override.

The conversion table in ``sglang_eagle3_ext.runtime.layers`` is checked against each pinned release's OWN
``set_eagle3_layers_to_capture``: the method is cut out of the release source with ``ast`` and
executed on a stand-in ``self`` (it only sets attributes; the real class needs a GPU to build).
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import layers
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import layer_check, releases

DATA = Path(__file__).parent / "data" / "layers"
KIMI = DATA / "kimi_k25_target"
TARGETS = {  # family -> (tiny target config folder, num_hidden_layers)
    "llama": (DATA / "llama31_8b_target", 32),
    "qwen2": (DATA / "qwen2_7b_target", 28),
    "qwen3": (DATA / "qwen3_8b_target", 36),
    "deepseek_v2": (DATA / "kimi_k2_target", 61),
    "kimi_k25": (KIMI, 61),
}


# ---------------------------------------------------------------------------------------------
# helpers: run a release's own set_eagle3_layers_to_capture


def _release_version(root: Path) -> str:
    return locate(root).version


@functools.cache
def _cut_method(root: Path, family: layers.Family) -> tuple[str, str] | None:
    """(class name, method source) of the family's set_eagle3_layers_to_capture in this release."""
    path = root / "sglang" / "srt" / "models" / family.source
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    inherits = False
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name in family.classes:
            inherits = True
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "set_eagle3_layers_to_capture":
                    return node.name, textwrap.dedent(ast.get_source_segment(text, item))
    if inherits and family.rules_of and family.name != "kimi_k25":
        # the class is there but inherits the method (glm4_moe_lite <= 0.5.12.post1: DeepseekV2's)
        return _cut_method(root, layers.FAMILIES[family.rules_of])
    return None


class _Inner:
    """Stands in for the inner *Model: plain attribute, or the MoE setter that tags layers."""

    def __init__(self) -> None:
        self.layers_to_capture: list[int] | None = None

    def set_eagle3_layers_to_capture(self, ids: list[int]) -> None:
        self.layers_to_capture = list(ids)


def _model_class(root: Path, family: layers.Family, wrap: bool = False):
    """A class named like SGLang's, whose set_eagle3_layers_to_capture is the release's own code.
    With ``wrap`` it goes through override_layer_ids first (what the patch / plugin hook does)."""
    cut = _cut_method(root, family)
    if cut is None:
        return None
    cls_name, src = cut
    ns: dict = {"logger": logging.getLogger("t")}
    # annotations stay unevaluated, so the release's typing imports are not needed
    code = "from __future__ import annotations\n" + src
    exec(compile(code, f"{root.name}:{family.source}", "exec"), ns)  # noqa: S102 - release source
    real = ns["set_eagle3_layers_to_capture"]
    if wrap:
        def method(self, layer_ids=None):
            return real(self, layers.override_layer_ids(self, layer_ids))
    else:
        method = real
    return type(cls_name, (), {"set_eagle3_layers_to_capture": method})


def _instance(root: Path, family: layers.Family, n: int, wrap: bool = False):
    cls = _model_class(root, family, wrap)
    if cls is None:
        return None
    obj = cls()
    obj.pp_group = SimpleNamespace(is_last_rank=True)
    obj.model = _Inner()
    if family.name == "kimi_k25":  # delegates to self.language_model (DeepseekV3ForCausalLM)
        obj.config = SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=n))
        obj.language_model = _instance(root, layers.FAMILIES["deepseek_v2"], n, wrap)
    else:
        obj.config = SimpleNamespace(num_hidden_layers=n)
    return obj


def _captured(obj) -> list[int]:
    inner = obj.language_model.model if hasattr(obj, "language_model") else obj.model
    return inner.layers_to_capture


ID_CASES = [None, [2, 30, 58], [1, 29, 57], [3, 31, 59], [-1, 2, 30], [0, 5, 9], [1], [1, 60, 7],
            [2, 30, 61]]


# ---------------------------------------------------------------------------------------------
# the table vs each release's own code


def test_config_to_loop_matches_release_code(release_root):
    """config_to_loop == what the release's set_eagle3_layers_to_capture stores, for every family
    present and a spread of id lists (incl. the DeepSeek 'first id == 1' and gpt_oss cases)."""
    version = _release_version(release_root)
    ran = 0
    for family in layers.FAMILIES.values():
        n = 61
        obj = _instance(release_root, family, n)
        has_method = obj is not None
        assert has_method == layers._ge(version, family.since), (family.name, version)
        if not has_method:
            continue
        for ids in ID_CASES:
            obj = _instance(release_root, family, n)
            obj.set_eagle3_layers_to_capture(None if ids is None else list(ids))
            assert _captured(obj) == layers.config_to_loop(family, version, ids, n), (family.name, ids)
            ran += 1
    assert ran >= len(ID_CASES) * 2


def test_deepseek_rule_text_matches_source(release_root):
    """The '+1 only if ids[0] == 1' heuristic exists exactly from 0.5.13 (PR #25454)."""
    version = _release_version(release_root)
    cut = _cut_method(release_root, layers.FAMILIES["deepseek_v2"])
    if cut is None:
        assert not layers._ge(version, "0.5.5")
        return
    heuristic = "layer_ids[0] == 1" in cut[1]
    assert heuristic == layers._ge(version, "0.5.13")
    assert ("if the first id is 1" in layers.rule_text(layers.FAMILIES["kimi_k25"], version)) == heuristic


def _no_arg_calls(root: Path) -> int:
    """set_eagle3_layers_to_capture() calls without arguments in model_executor/ (graph capture)."""
    count = 0
    for path in (root / "sglang" / "srt" / "model_executor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "set_eagle3_layers_to_capture"
                    and not node.args and not node.keywords):
                count += 1
    return count


def test_graph_default_window_matches_source(release_root):
    """graphs_use_defaults(v) <=> the release calls set_eagle3_layers_to_capture() with no args."""
    version = _release_version(release_root)
    assert (_no_arg_calls(release_root) > 0) == layers.graphs_use_defaults(version)


def test_draft_count_rule_matches_source(release_root):
    """fc width: 3 before 0.5.12, num_aux_hidden_states / len(ids) from 0.5.12 (llama_eagle3.py);
    the MLA draft's top-level key is read where kimi_k25_eagle3.py exists."""
    version = _release_version(release_root)
    models = release_root / "sglang" / "srt" / "models"
    reads_count = "num_aux_hidden_states" in (models / "llama_eagle3.py").read_text(encoding="utf-8")
    assert reads_count == layers._ge(version, "0.5.12")
    cfg = {"architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}}
    assert layers.draft_count(cfg, version)[0] == (4 if reads_count else 3)
    mla = models / "kimi_k25_eagle3.py"
    if mla.is_file():
        src = mla.read_text(encoding="utf-8")
        assert 'getattr(config, "eagle_aux_hidden_state_layer_ids"' in src
        top = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "eagle_aux_hidden_state_layer_ids": [1, 2]}
        assert layers.draft_count(top, version)[0] == 2


def _capture_exprs(path: Path) -> list[str]:
    """What `if i in self.layers_to_capture:` appends, for releases that still spell it out."""
    exprs = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "i in self.layers_to_capture":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") in ("append", "all_gather") \
                        and sub.args:
                    exprs.append(ast.unparse(sub.args[0]))
    return exprs


def test_emb_outcome_matches_source(release_root):
    """Loop index 0 (residual still None): `hidden + residual` -> TypeError; a `residual is not
    None` guard -> silent capture. Checked wherever the release spells the capture out."""
    version = _release_version(release_root)
    checked = 0
    for name in ("llama", "qwen2", "deepseek_v2", "glm4_moe", "gpt_oss"):
        family = layers.FAMILIES[name]
        path = release_root / "sglang" / "srt" / "models" / family.source
        if not path.is_file() or not layers._ge(version, family.since):
            continue
        exprs = _capture_exprs(path)
        if not exprs:
            continue  # communicator / layer-boundary capture: not decidable by reading one line
        guarded = any("is not None" in e for e in exprs)
        expected = "silent" if guarded else "typeerror"
        assert layers.emb_outcome(family, version) == expected, (name, exprs)
        checked += 1
    if not layers._ge(version, "0.5.23"):
        assert checked >= 1


# ---------------------------------------------------------------------------------------------
# ours -> config ids, proven by the release's own code


WANTED = [[2, 30, 58], [0, 29, 57], [1, 29, 57], [5, 10, 20], ["emb", 2, 30], [0, 1, 2]]


def test_ours_to_config_round_trips_through_release_code(release_root):
    """For every family x wanted layers: ours_to_config's ids, fed to the release's own method,
    capture exactly the wanted loop indices; or ours_to_config refuses with a clear reason."""
    version = _release_version(release_root)
    done = refused = 0
    for family in layers.FAMILIES.values():
        if not layers._ge(version, family.since):
            with pytest.raises(layers.LayerError, match="support EAGLE-3 only from"):
                layers.ours_to_config(family, version, [2, 30, 58], 61)
            continue
        for wanted in WANTED:
            try:
                ids = layers.ours_to_config(family, version, wanted, 61)
            except layers.LayerError as exc:
                assert "emb" in wanted and "embedding" in str(exc)
                refused += 1
                continue
            obj = _instance(release_root, family, 61)
            obj.set_eagle3_layers_to_capture(ids)
            assert sorted(_captured(obj)) == sorted(layers.to_loop(x) for x in wanted), (family.name, wanted)
            done += 1
    assert done >= 10


def test_override_through_release_code_incl_nested_kimi(release_root, monkeypatch):
    """What the patch / plugin does: wrap every set_eagle3_layers_to_capture with
    override_layer_ids (KimiK25 and its inner DeepseekV3 both wrapped) - the capture is the
    requested layers in every release, for config ids and for the no-arg graph-capture call."""
    version = _release_version(release_root)
    monkeypatch.setattr(layers, "_sglang_version", lambda: version)
    monkeypatch.setenv(layers.ENV, "2,30,58")
    for name in ("llama", "qwen3", "deepseek_v2", "kimi_k25"):
        family = layers.FAMILIES[name]
        for incoming in ([1, 29, 57], None):
            obj = _instance(release_root, family, 61, wrap=True)
            if obj is None:
                assert not layers._ge(version, family.since)
                break
            obj.set_eagle3_layers_to_capture(incoming)
            assert sorted(_captured(obj)) == [3, 31, 59], (name, incoming)


# ---------------------------------------------------------------------------------------------
# conventions and parsing


def test_parse_and_convert():
    assert layers.parse_layers("emb,2,30") == ["emb", 2, 30]
    assert layers.parse_layers("[2, 30, 58]") == [2, 30, 58]
    assert layers.parse_hf_layers("3,31,59") == [2, 30, 58]
    assert layers.parse_hf_layers("0,3") == ["emb", 2]
    assert [layers.to_loop(x) for x in ["emb", 0, 58]] == [0, 1, 59]
    assert layers.from_loop(0) == "emb" and layers.from_loop(59) == 58
    assert layers.default_loop(61) == [2, 30, 58] and layers.default_loop(32) == [2, 16, 29]
    for bad, msg in (("-1,2", "write 'emb'"), ("2,2", "twice"), ("", "no layers"), ("a,b", "not a layer")):
        with pytest.raises(UserError, match=msg) as ei:
            layers.parse_layers(bad)
        assert ei.value.exit_code == 2


@pytest.mark.parametrize("version,ids,prefill,decode", [
    ("0.4.8", [2, 30, 58], [2, 30, 58], [2, 30, 58]),          # ids never read
    ("0.5.9", [2, 30, 58], [3, 31, 59], [2, 30, 58]),          # graphs use defaults
    ("0.5.12.post1", [2, 30, 58], [3, 31, 59], [3, 31, 59]),
    ("0.5.13", [2, 30, 58], [2, 30, 58], [2, 30, 58]),         # raw: first id != 1
    ("0.5.13", [1, 29, 57], [2, 30, 58], [2, 30, 58]),         # +1: first id == 1
    ("0.5.23", [3, 31, 59], [3, 31, 59], [3, 31, 59]),
])
def test_worked_example_kimi_k25(version, ids, prefill, decode):
    """Reference 3.3 worked example on the 61-layer Kimi-K2.5 target."""
    rep = layer_check.check(json.loads((KIMI / "config.json").read_text()),
                       {"architectures": ["LlamaForCausalLMEagle3"],
                        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}, version)
    assert (rep.prefill_loop, rep.decode_loop) == (prefill, decode)


def test_deepseek_heuristic_dodged_by_order():
    """0.5.13+: wanting output of layer 0 (loop 1) with a first id of 1 would switch on +1, so the
    1 is moved off the front; the ids are still raw loop indices."""
    fam = layers.FAMILIES["deepseek_v2"]
    ids = layers.ours_to_config(fam, "0.5.13", [0, 30, 58], 61)
    assert ids[0] != 1 and sorted(ids) == [1, 31, 59]
    assert sorted(layers.config_to_loop(fam, "0.5.13", ids, 61)) == [1, 31, 59]
    assert layers.ours_to_config(fam, "0.5.12.post1", [0, 30, 58], 61) == [0, 30, 58]
    with pytest.raises(layers.LayerError, match="a first id of 1"):
        layers.ours_to_config(fam, "0.5.13", [0], 61)


def test_impossible_requests():
    llama, ds, gpt = (layers.FAMILIES[n] for n in ("llama", "deepseek_v2", "gpt_oss"))
    with pytest.raises(layers.LayerError, match="TypeError"):
        layers.ours_to_config(llama, "0.5.19", ["emb", 2, 30], 32)
    assert layers.ours_to_config(llama, "0.5.22", ["emb", 2, 30], 32) == [-1, 2, 30]
    assert layers.ours_to_config(ds, "0.5.16", ["emb", 2, 30], 61) == [0, 3, 31]
    with pytest.raises(layers.LayerError, match="last layer"):
        layers.ours_to_config(llama, "0.5.23", [2, 16, 31], 32)
    with pytest.raises(layers.LayerError, match="does not exist"):
        layers.ours_to_config(llama, "0.5.23", [2, 16, 40], 32)
    assert layers.ours_to_config(gpt, "0.5.17", [2, 16, 23], 24) == [3, 17, 24]  # final boundary
    with pytest.raises(layers.LayerError, match="never reads"):
        layers.ours_to_config(llama, "0.4.8", [2, 16, 29], 32)


# ---------------------------------------------------------------------------------------------
# runtime override


class DeepseekV3ForCausalLM:  # named like SGLang's class: the family comes from the class name
    def __init__(self, n: int = 61) -> None:
        self.config = SimpleNamespace(num_hidden_layers=n)


class KimiK25ForConditionalGeneration:
    def __init__(self) -> None:
        self.config = SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=61))
        self.language_model = DeepseekV3ForCausalLM()


def test_override_passthrough_env_wins_and_idempotent(monkeypatch, caplog):
    monkeypatch.delenv(layers.ENV, raising=False)
    monkeypatch.setattr(layers, "_sglang_version", lambda: "0.5.23")
    monkeypatch.setattr(layers, "_logged", False)
    m = DeepseekV3ForCausalLM()
    assert layers.override_layer_ids(m, [1, 2, 3]) == [1, 2, 3]
    assert layers.override_layer_ids(m, None) is None
    assert layers.override_layer_ids(m, None, requested="  ") is None
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext.runtime.layers"):
        assert layers.override_layer_ids(m, [9, 9, 9], requested="2,30,58") == [3, 31, 59]
        monkeypatch.setenv(layers.ENV, "1,29,57")  # env wins over requested
        outer = layers.override_layer_ids(KimiK25ForConditionalGeneration(), [2, 30, 58], "2,30,58")
        inner = layers.override_layer_ids(m, outer, "2,30,58")
    assert outer == inner == [2, 30, 58]
    logged = [r.getMessage() for r in caplog.records if "aux layers" in r.getMessage()]
    assert len(logged) == 1 and "loop indices [3, 31, 59]" in logged[0]


def test_override_errors(monkeypatch):
    monkeypatch.delenv(layers.ENV, raising=False)
    monkeypatch.setattr(layers, "_sglang_version", lambda: "0.5.12.post1")
    m = DeepseekV3ForCausalLM()
    with pytest.raises(layers.LayerError, match="expects 3"):
        layers.override_layer_ids(m, [1, 2, 3], requested="2,30")
    with pytest.raises(layers.LayerError, match="embedding output"):
        layers.override_layer_ids(m, None, requested="emb,2,30")
    with pytest.raises(layers.LayerError, match="last layer"):
        layers.override_layer_ids(m, None, requested="2,30,60")


def test_override_running_version_is_installed_sglang():
    """Without monkeypatching, the version is the installed SGLang's (metadata only, no import)."""
    layers._sglang_version.cache_clear()
    try:
        assert layers._sglang_version() == locate(None).version
    finally:
        layers._sglang_version.cache_clear()


# ---------------------------------------------------------------------------------------------
# `layers check`: the seeds' case and the table over releases x families


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(["layers", "check", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _draft(tmp_path: Path, ids, name: str = "draft", **extra) -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, **extra}
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("version,right", [("0.5.12.post1", "draft_2_30_58"), ("0.5.23", "draft_3_31_59")])
def test_seeds_case_kimi_k25(version, right, capsys, tmp_path):
    """61-layer Kimi-K2.5 target, draft trained on outputs of layers 2,30,58 (HF 3,31,59): the
    right ids pass; the '-1' fix (embedding added) fails and names the embedding."""
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / right), "--sglang-version", version,
                       "--trained-on", "2,30,58"], capsys)
    assert rc == 0, out
    assert "2,30,58  (loop / HF indices 3,31,59)" in out and "OK" in out
    rc, out, _ = _run(["--target", str(KIMI / "config.json"), "--draft", str(DATA / right),
                       "--sglang-version", version, "--trained-on-hf", "3,31,59", "--json"], capsys)
    assert rc == 0 and json.loads(out)["capture"]["decode"]["layers"] == [2, 30, 58]
    minus1 = [DATA / "draft_minus1", _draft(tmp_path, [-1, 2, 30, 58], "m4")]
    for draft in minus1:
        for trained in (["--trained-on", "2,30,58"], []):
            rc, out, _ = _run(["--target", str(KIMI), "--draft", str(draft), "--sglang-version", version,
                               *trained], capsys)
            assert rc == 1, out
            assert "embedding output (emb" in out, out


def test_seeds_case_wrong_release_ids_give_concrete_fix(capsys):
    """[2,30,58] is right on 0.5.12.post1 but means outputs 1,29,57 on 0.5.13+: the fix names [3,31,59]."""
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"),
                       "--sglang-version", "0.5.13", "--trained-on", "2,30,58"], capsys)
    assert rc == 1 and "captures outputs of layers 1, 29, 57" in out
    assert "eagle_aux_hidden_state_layer_ids to [3, 31, 59]" in out


def test_graph_default_window_reports_prefill_and_decode(capsys):
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"),
                       "--sglang-version", "0.5.10", "--trained-on", "2,30,58"], capsys)
    assert rc == 1
    assert "prefill (eager):          2,30,58" in out and "decode (CUDA graphs):     1,29,57" in out
    assert "--disable-cuda-graph" in out
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"),
                       "--sglang-version", "0.5.10"], capsys)
    assert rc == 1 and "[1, 29, 57]" in out  # fix: make the ids equal the defaults


def test_top_level_key_mla_draft(capsys):
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / "draft_mla_toplevel"),
                       "--sglang-version", "0.5.23", "--trained-on", "2,30,58", "--json"], capsys)
    rep = json.loads(out)
    assert rc == 1 and rep["draft"]["expected_count"] == 3
    assert any("only a top-level" in p["problem"] for p in rep["problems"])
    assert rep["capture"]["prefill"]["layers"] == [1, 29, 57]  # the defaults


def test_count_and_range_problems(capsys, tmp_path):
    rc, out, _ = _run(["--target", str(DATA / "llama31_8b_target"), "--draft", str(_draft(tmp_path, [2, 16, 31])),
                       "--sglang-version", "0.5.23"], capsys)
    assert rc == 1 and "never reached" in out
    d4 = _draft(tmp_path, [2, 10, 16, 28], "d4")
    rc, out, _ = _run(["--target", str(DATA / "llama31_8b_target"), "--draft", str(d4),
                       "--sglang-version", "0.5.9"], capsys)
    assert rc == 1 and "fc expects 3" in out
    rc, out, _ = _run(["--target", str(DATA / "llama31_8b_target"), "--draft", str(d4),
                       "--sglang-version", "0.5.12.post1", "--trained-on", "2,10,16,28"], capsys)
    assert rc == 0, out


@pytest.mark.parametrize("version", releases.PINNED)
@pytest.mark.parametrize("family", sorted(TARGETS))
def test_table_right_ids_pass_wrong_fail(version, family, capsys, tmp_path):
    """Releases x families: the ids ours_to_config gives pass; ids off by one fail; a release that
    predates the family's EAGLE-3 support fails with the version to use."""
    folder, n = TARGETS[family]
    fam = layers.FAMILIES[family]
    trained = [1, n // 2 - 1, n - 4]  # the defaults in our words: consistent even where graphs use them
    base = ["--target", str(folder), "--sglang-version", version, "--trained-on", layers.format_layers(trained)]
    if not layers._ge(version, fam.since):
        rc, out, _ = _run([*base, "--draft", str(_draft(tmp_path, [1, 2, 3]))], capsys)
        assert rc == 1 and f"use SGLang >= {fam.since}" in out
        return
    ids = layers.ours_to_config(fam, version, trained, n)
    rc, out, _ = _run([*base, "--draft", str(_draft(tmp_path, ids, "ok"))], capsys)
    assert rc == 0, out
    rc, out, _ = _run([*base, "--draft", str(_draft(tmp_path, [i + 1 for i in ids], "off"))], capsys)
    assert rc == 1, out
    other = [2, n // 2, n - 3]  # not the defaults: prefill and decode differ in 0.4.9-0.5.10
    ids = layers.ours_to_config(fam, version, other, n)
    rc, out, _ = _run(["--target", str(folder), "--sglang-version", version, "--trained-on",
                       layers.format_layers(other), "--draft", str(_draft(tmp_path, ids, "other"))], capsys)
    assert rc == (1 if layers.graphs_use_defaults(version) else 0), out


def test_bad_input_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    unknown = tmp_path / "u.json"
    unknown.write_text(json.dumps({"architectures": ["FooForCausalLM"], "num_hidden_layers": 4}))
    cases = [
        (["--target", str(tmp_path / "missing"), "--draft", str(DATA / "draft_2_30_58")], "no such file"),
        (["--target", str(bad), "--draft", str(DATA / "draft_2_30_58")], "not valid JSON"),
        (["--target", str(unknown), "--draft", str(DATA / "draft_2_30_58")], "FooForCausalLM"),
        (["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"), "--trained-on=-1,2"], "emb"),
        (["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"), "--sglang-version", "x.y"],
         "--sglang-version"),
    ]
    for argv, msg in cases:
        rc, _, err = _run([*argv, "--sglang-version", "0.5.23"] if "--sglang-version" not in argv else argv,
                          capsys)
        assert rc == 2 and msg in err, (argv, err)


def test_default_version_from_sglang_root(capsys):
    """Without --sglang-version the --sglang-root tree's version decides (here 0.5.9: graphs)."""
    root = releases.fetch("0.5.9")
    rc, out, _ = _run(["--target", str(KIMI), "--draft", str(DATA / "draft_2_30_58"),
                       "--sglang-root", str(root)], capsys)
    assert rc == 1 and out.startswith("SGLang 0.5.9;")


def test_override_leaves_loop_index_setters_alone(monkeypatch):
    """Inner setters that take loop indices (0.5.23 Qwen2MoeModel / Qwen3NextModel, and
    qwen3_5.py's Qwen3_5ForCausalLM(layers_to_capture)) must pass the outer result through."""
    monkeypatch.setenv(layers.ENV, "2,30,58")
    monkeypatch.setattr(layers, "_sglang_version", lambda: "0.5.23")
    Qwen2MoeModel = type("Qwen2MoeModel", (), {})
    assert layers.override_layer_ids(Qwen2MoeModel(), [3, 31, 59]) == [3, 31, 59]

    class Qwen3_5ForCausalLM:
        config = SimpleNamespace(num_hidden_layers=61)

        def set_eagle3_layers_to_capture(self, layers_to_capture):
            return layers.override_layer_ids(self, layers_to_capture)

    assert Qwen3_5ForCausalLM().set_eagle3_layers_to_capture([3, 31, 59]) == [3, 31, 59]
    Qwen3MoeForCausalLM = type("Qwen3MoeForCausalLM", (), {"config": SimpleNamespace(num_hidden_layers=61)})
    assert layers.override_layer_ids(Qwen3MoeForCausalLM(), [9, 9, 9]) == [2, 30, 58]


def test_check_judges_the_aux_layers_override():
    """`layers check --aux-layers`: the capture `launch --aux-layers` sets, checked against the
    layers the draft was trained on (the wiring table's three cases, docs/results.md)."""
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}
    draft = {"architectures": ["LlamaForCausalLMEagle3"],
             "eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 17, 30]}}
    trained = layers.parse_layers("2,16,29")
    default = layer_check.check(target, draft, "0.5.16", trained)
    assert not default.ok and layers.format_layers([layers.from_loop(i) for i in default.prefill_loop]) == "3,17,30"
    fixed = layer_check.check(target, draft, "0.5.16", trained, layers.parse_layers("2,16,29"))
    assert fixed.ok and fixed.prefill_loop == fixed.decode_loop == [3, 17, 30]
    off = layer_check.check(target, draft, "0.5.16", trained, layers.parse_layers("1,15,28"))
    assert not off.ok and "1, 15, 28" in off.problems[0].what


def test_layers_check_cli_aux_layers(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "t").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}))
    (tmp_path / "d" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"],
                                                            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 17, 30]}}))
    base = [sys.executable, "-m", "sglang_eagle3_ext", "layers", "check", "--target", str(tmp_path / "t"),
            "--draft", str(tmp_path / "d"), "--trained-on", "2,16,29", "--sglang-version", "0.5.16"]
    assert subprocess.run(base, capture_output=True, text=True).returncode == 1
    r = subprocess.run(base + ["--aux-layers", "2,16,29"], capture_output=True, text=True)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
    bad = subprocess.run(base + ["--aux-layers", "1,,2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
