"""`layers check` for every target family a supported release serves with EAGLE-3, against the
release's OWN ``set_eagle3_layers_to_capture``.

The method is cut out of each pinned release's source with ``ast`` and executed on a stand-in
``self`` (on CPU the real classes cannot be built: they need a GPU and weights). The stand-in has
only what the method reads: ``pp_group``, ``config`` (``num_hidden_layers`` top-level and in
``text_config``), ``model`` / ``language_model`` recording what they are given; a wrapper that
hands the ids on (Llama-4, Gemma-3, Kimi-K2.5) gets a stand-in of the class its ``__init__`` builds,
running that class's own method. The target configs under tests/data/layers/families/ carry the
fields of the published model cards (architectures, layer count, vocab), written by hand.
"""

from __future__ import annotations

import ast
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
from sglang_eagle3_ext.serve import capture_rules, layer_check, releases

FAMILIES = Path(__file__).parent / "data" / "layers" / "families"
CONFIGS = {p.name: json.loads((p / "config.json").read_text()) for p in sorted(FAMILIES.iterdir())}


def _version(root: Path) -> str:
    return locate(root).version


# ---------------------------------------------------------------------------------------------
# the release's own method on a stand-in


class _Inner:
    """The inner *Model: a plain attribute, or the setter that takes loop indices."""

    def __init__(self, n: int) -> None:
        self.layers_to_capture: list[int] | None = None
        self.layers = [SimpleNamespace() for _ in range(n)]

    def set_eagle3_layers_to_capture(self, ids: list[int]) -> None:
        self.layers_to_capture = list(ids)


def _index(root: Path):
    return capture_rules._index((root / "sglang" / "srt" / "models").resolve())


def _real_object(root: Path, arch: str, n: int, cls=None):
    """A stand-in whose set_eagle3_layers_to_capture is the release's own (None: not served, or
    no such method)."""
    idx = _index(root)
    if cls is None:
        f = idx.entry.get(arch)
        cls = capture_rules._resolve(idx, arch, f) if f else None
        if cls is None:
            return None
    mro = capture_rules._mro(idx, cls)
    owner = next((c for c in mro if capture_rules._method(c, capture_rules.METHOD)), None)
    if owner is None:
        return None
    fn = capture_rules._method(owner, capture_rules.METHOD)
    text = idx.texts[owner.file]
    ns: dict = {"logger": logging.getLogger("t"),
                "get_parallel": lambda: SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True)),
                "get_pp_group": lambda: SimpleNamespace(is_last_rank=True)}
    code = "from __future__ import annotations\n" + textwrap.dedent(ast.get_source_segment(text, fn))
    exec(compile(code, f"{root.name}:{owner.file}", "exec"), ns)  # noqa: S102 - release source
    obj = type(cls.name, (), {capture_rules.METHOD: ns[capture_rules.METHOD]})()
    obj.pp_group = SimpleNamespace(is_last_rank=True)
    obj.config = SimpleNamespace(num_hidden_layers=n, text_config=SimpleNamespace(num_hidden_layers=n))
    obj.model = _Inner(n)
    obj.language_model = _Inner(n)
    rule, attr, _ = capture_rules._classify(fn)
    if not rule:  # hands the ids to self.<attr>: a stand-in of the class __init__ builds there
        _, target = capture_rules._attr_class(idx, mro, attr)
        if target is None:
            return None
        setattr(obj, attr, _real_object(root, target.name, n, target))
    return obj


def _captured(obj) -> list[int] | None:
    for attr in ("language_model", "model"):
        inner = getattr(obj, attr)
        if isinstance(inner, _Inner):
            if inner.layers_to_capture is not None:
                return inner.layers_to_capture
        else:
            got = _captured(inner)
            if got is not None:
                return got
    return None


def real_capture(root: Path, arch: str, ids: list[int] | None, n: int) -> list[int] | None:
    obj = _real_object(root, arch, n)
    if obj is None:
        return None
    obj.set_eagle3_layers_to_capture(None if ids is None else list(ids))
    return _captured(obj)


def _ids_cases(n: int) -> list[list[int] | None]:
    return [None, [2, n // 2, n - 3], [1, n // 2 - 1, n - 4], [-1, 2, 5], [3, n - 2, n], [1]]


def _draft(ids) -> dict:
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    return cfg


# ---------------------------------------------------------------------------------------------
# the table is what the sources say; the verdicts are what the code does


def test_pinned_table_is_derived_from_the_release(release_root):
    """capture_table.py (what `layers check` reads) equals a fresh read of this release's source."""
    version = _version(release_root)
    fresh = capture_rules.derive(str(release_root / "sglang"), version)
    assert fresh.to_json() == capture_rules.pinned()[version].to_json()
    # a served class without the method is 'none'; every class with it has a rule or one line why
    for arch, cap in fresh.targets.items():
        assert cap.rule in (*capture_rules.RULES, "unknown"), arch
        assert cap.rule != "unknown" or cap.why, arch


def test_verdicts_equal_release_code_for_every_family(release_root):
    """For every family config x id list: the capture `layers check` reports is what the release's
    own method stores; where the release has no EAGLE-3 capture for the class, the check says so
    (never 'not one we know')."""
    version = _version(release_root)
    compared = refused = 0
    for name, target in CONFIGS.items():
        arch = target["architectures"][0]
        n = layers.num_hidden_layers(target)
        cap = capture_rules.pinned()[version].get(arch)
        for ids in _ids_cases(n):
            real = real_capture(release_root, arch, ids, n)
            rep = layer_check.check(target, _draft(ids), version)
            if real is None:
                assert cap is None or cap.rule in ("none", "unknown"), (name, version)
                assert not rep.ok, (name, version)
                assert any(w in rep.problems[0].what for w in (
                    "does not serve", "without EAGLE-3", "no verdict",
                    "has no set_eagle3_layers_to_capture")), rep.problems[0].what
                refused += 1
                continue
            assert rep.fam is not None, (name, version, rep.problems)
            assert rep.prefill_loop == real, (name, version, ids, rep.rule)
            compared += 1
    assert compared >= 6
    if version == "0.5.23":
        assert refused == len(_ids_cases(32))  # only Mixtral: served, no EAGLE-3 capture


def test_every_served_class_rule_matches_runtime_override(release_root):
    """The in-SGLang override (runtime/layers.py, stdlib only, no source reading) uses the same
    rule as the release's code for every class the release serves with EAGLE-3."""
    version = _version(release_root)
    for arch, cap in capture_rules.pinned()[version].targets.items():
        if cap.rule not in capture_rules.RULES:
            continue
        fam = layers.family_for(arch) or layers.Family("generic(+1)", "?", "0.4.9", (arch,))
        if cap.shift_defaults:
            continue  # defaults only: the override always passes explicit ids
        assert layers.rule_kind(fam, version) == cap.rule, (arch, version)


# ---------------------------------------------------------------------------------------------
# the ambiguity line


KIMI = Path(__file__).parent / "data" / "layers" / "kimi_k25_target"


def _readings_from_code(arch: str, ids, n: int) -> set[tuple]:
    """What every pinned release's own code, vLLM and the two training conventions read ``ids``
    as (loop indices; unreachable ones dropped the same way for all)."""
    out = set()
    for v in releases.PINNED:
        real = real_capture(releases.fetch(v), arch, ids, n)
        if real is not None and layers.reads_config_ids(v):
            out.add(tuple(sorted(real)))
    raw = list(ids) if ids is not None else [2, n // 2, n - 3]  # vLLM's defaults are loop indices too
    out.add(tuple(sorted(raw)))  # vLLM / HF hidden_states[k]
    out.add(tuple(sorted(i + 1 for i in ids) if ids is not None else raw))  # 'output of layer k'
    return out


@pytest.mark.parametrize("name,ids", [
    ("deepseek_v3", [2, 30, 58]), ("deepseek_v3", [1, 29, 57]), ("deepseek_v3", None),
    ("qwen3_next_80b", [2, 24, 45]), ("qwen3_next_80b", None), ("gpt_oss_120b", [24, 30, 36]),
    ("minimax_m3_vl", None), ("llama4_scout", [1, 23, 44]),
])
def test_ambiguity_line_exactly_where_readings_differ(name, ids):
    target = CONFIGS[name]
    n = layers.num_hidden_layers(target)
    arch = target["architectures"][0]
    rep = layer_check.check(target, _draft(ids), "0.5.23")
    differ = len({tuple(sorted(x for x in r if 0 <= x <= n)) for r in _readings_from_code(arch, ids, n)}) > 1
    assert bool(rep.ambiguity) == differ, (name, ids, rep.ambiguity)
    assert rep.ok or not differ or rep.problems  # a warning, not a failure, without --strict
    strict = layer_check.check(target, _draft(ids), "0.5.23", strict=True)
    assert (any(p.what == rep.ambiguity for p in strict.problems) if differ else
            not any("mean" in p.what for p in strict.problems))
    told = layer_check.check(target, _draft(ids), "0.5.23", trained_on=[1, 2, 3])
    assert told.ambiguity == ""


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(["layers", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_kimi_case_both_readings_named(capsys):
    """Draft ids [2,30,58] on the 61-layer Kimi-K2.5: outputs of 2,30,58 on SGLang <= 0.5.12.post1,
    outputs of 1,29,57 on >= 0.5.13 and vLLM. OK without --strict (exit 0), exit 1 with it."""
    draft = Path(__file__).parent / "data" / "layers" / "draft_2_30_58"
    for version in ("0.5.12.post1", "0.5.23"):
        rc, out, _ = _run(["check", "--target", str(KIMI), "--draft", str(draft), "--sglang-version", version],
                          capsys)
        assert rc == 0, out
        warning = [line for line in out.splitlines() if line.startswith("warning: ")]
        assert len(warning) == 1, out
        assert "outputs of layers 2, 30, 58 on SGLang <= 0.5.12.post1" in warning[0]
        assert "outputs of layers 1, 29, 57 on SGLang >= 0.5.13" in warning[0]
        assert "vLLM" in warning[0] and "--trained-on 2,30,58 or --trained-on 1,29,57" in warning[0]
        rc, out, _ = _run(["check", "--target", str(KIMI), "--draft", str(draft), "--sglang-version", version,
                           "--strict"], capsys)
        assert rc == 1 and "FAIL: 1 problem" in out, out
    rc, out, _ = _run(["check", "--target", str(KIMI), "--draft", str(draft), "--sglang-version", "0.5.23",
                       "--trained-on", "1,29,57"], capsys)
    assert rc == 0 and "warning" not in out
    rc, out, _ = _run(["check", "--target", str(KIMI), "--draft", str(draft), "--sglang-version", "0.5.23",
                       "--json"], capsys)
    rep = json.loads(out)
    assert rc == 0 and rep["ok"] and "SGLang <= 0.5.12.post1" in rep["ambiguity"]
    assert rep["rule_source"].startswith("deepseek_v2.py:DeepseekV2ForCausalLM:")


# ---------------------------------------------------------------------------------------------
# unknown families, draft side, swapped arguments, fix lines


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("name", ["qwen3_next_80b", "llama4_scout", "minimax_m2", "qwen2_5_vl_7b",
                                  "qwen3_vl_8b", "glm4_7_flash", "gemma3_27b", "longcat_flash"])
def test_formerly_unknown_families_answer(name, capsys, tmp_path):
    """The families `layers check` used to stop on (exit 2) get a verdict with the rule's source."""
    n = layers.num_hidden_layers(CONFIGS[name])
    target = _write(tmp_path, "t", CONFIGS[name])
    draft = _write(tmp_path, "d", {**_draft([1, n // 2 - 1, n - 4]), "vocab_size": CONFIGS[name].get(
        "vocab_size") or CONFIGS[name]["text_config"]["vocab_size"]})
    rc, out, err = _run(["check", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23",
                         "--trained-on", f"1,{n // 2 - 1},{n - 4}"], capsys)
    assert rc == 0, out + err
    assert "OK" in out and ".py:" in out  # the method that decides is named


def test_served_without_eagle3_and_not_served(capsys, tmp_path):
    target = _write(tmp_path, "t", CONFIGS["mixtral_8x7b"])
    draft = _write(tmp_path, "d", _draft([2, 16, 29]))
    rc, out, _ = _run(["check", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23"],
                      capsys)
    assert rc == 1 and "serves MixtralForCausalLM without EAGLE-3" in out
    # Qwen3-Next on 0.5.3.post2: its class has no capture there; the fix names the first release
    q = _write(tmp_path, "q", CONFIGS["qwen3_next_80b"])
    rc, out, _ = _run(["check", "--target", str(q), "--draft", str(draft), "--sglang-version", "0.5.3.post2"],
                      capsys)
    assert rc == 1 and "use SGLang >= 0.5.9" in out, out


def test_swapped_target_and_draft(capsys, tmp_path):
    target = _write(tmp_path, "t", CONFIGS["qwen3_next_80b"])
    draft = _write(tmp_path, "d", _draft([2, 24, 45]))
    rc, _, err = _run(["check", "--target", str(draft), "--draft", str(target), "--sglang-version", "0.5.23"],
                      capsys)
    assert rc == 2 and err.count("\n") == 1 and "swapped" in err
    rc, _, err = _run(["check", "--target", str(target), "--draft", str(target), "--sglang-version", "0.5.23"],
                      capsys)
    assert rc == 2 and err.count("\n") == 1 and "not an EAGLE-3 draft" in err


def test_draft_side_per_release():
    target = CONFIGS["gpt_oss_120b"]
    draft = {**_draft([24, 30, 36]), "vocab_size": 201088, "draft_vocab_size": 32000,
             "norm_before_fc": True}
    old = layer_check.check(target, draft, "0.5.16", trained_on=[23, 29, 35])
    text = "\n".join(f"{p.what} | {p.fix}" for p in old.problems)
    assert "norm_before_fc" in text and "use SGLang >= 0.5.19" in text
    # the fix for the ids is a release, not 'no config ids can do it'
    assert "use SGLang >= 0.5.17" in text and "PR #32334" in text
    new = layer_check.check(target, draft, "0.5.19", trained_on=[23, 29, 35])
    assert new.ok, [p.what for p in new.problems]
    bad = layer_check.check(target, {**draft, "architectures": ["Glm4MoeForCausalLMEagle3"]}, "0.5.23",
                            trained_on=[23, 29, 35])
    assert any("cannot load the draft class Glm4MoeForCausalLMEagle3" in p.what for p in bad.problems)
    vocab = layer_check.check(target, {**draft, "vocab_size": 151936}, "0.5.19", trained_on=[23, 29, 35])
    assert any("vocab_size 151936 differs" in p.what for p in vocab.problems)


def test_fix_line_names_release_without_trained_on():
    rep = layer_check.check(CONFIGS["gpt_oss_120b"], _draft([24, 30, 36]), "0.5.16")
    fixes = [p.fix for p in rep.problems if "never reached" in p.what]
    assert fixes and fixes[0].startswith("use SGLang >= 0.5.17, which reads these ids as outputs of "
                                         "layers 23, 29, 35")


def test_families_command(capsys):
    rc, out, _ = _run(["families", "--sglang-version", "0.5.23", "--json"], capsys)
    data = json.loads(out)["0.5.23"]
    assert rc == 0 and data["targets"]["Qwen3NextForCausalLM"]["rule"] == "plus1"
    assert data["targets"]["KimiK25ForConditionalGeneration"]["via"].startswith("language_model")
    assert "norm_before_fc" in data["drafts"]["LlamaForCausalLMEagle3"]["eagle3_1_fields"]


def test_unknown_everywhere_is_one_line(capsys, tmp_path):
    """A class no supported release registers: one line, exit 2 (bad input, nothing to judge)."""
    target = _write(tmp_path, "t", {"architectures": ["FooForCausalLM"], "num_hidden_layers": 4})
    draft = _write(tmp_path, "d", _draft([1, 2, 3]))
    rc, out, err = _run(["check", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23"],
                        capsys)
    assert rc == 2 and err.count("\n") == 1 and "nor by any supported release" in err
    with pytest.raises(UserError, match="not served by SGLang 0.5.23 nor by any supported release"):
        layer_check.check(json.loads((target / "config.json").read_text()), _draft([1, 2, 3]), "0.5.23")


def test_newer_release_class_gets_its_codes_answer(tmp_path):
    """A release after the pinned ones, with a class no table knows: the verdict comes from that
    tree's own method (here a +1 rule behind a wrapper, and a rule this reader cannot name)."""
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "newlm.py").write_text(textwrap.dedent('''
        class NewLMForCausalLM(nn.Module):
            def set_eagle3_layers_to_capture(self, layer_ids=None):
                if layer_ids is None:
                    self.model.layers_to_capture = [2, 4, 6]
                else:
                    self.model.layers_to_capture = [val + 1 for val in layer_ids]

        class NewVLForConditionalGeneration(nn.Module):
            def __init__(self, config):
                self.language_model = NewLMForCausalLM(config)

            def set_eagle3_layers_to_capture(self, layer_ids=None):
                self.language_model.set_eagle3_layers_to_capture(layer_ids)

        class OddForCausalLM(nn.Module):
            def set_eagle3_layers_to_capture(self, layer_ids=None):
                self.model.layers_to_capture = [v * 2 for v in layer_ids] if len(layer_ids) > 2 else []

        EntryClass = [NewLMForCausalLM, NewVLForConditionalGeneration, OddForCausalLM]
        '''))
    (models / "llama_eagle3.py").write_text("class LlamaForCausalLMEagle3:\n    pass\n\n"
                                            "EntryClass = [LlamaForCausalLMEagle3]\n")
    target = {"architectures": ["NewVLForConditionalGeneration"], "text_config": {"num_hidden_layers": 40}}
    rep = layer_check.check(target, _draft([3, 20, 36]), "0.6.0", trained_on=[3, 20, 36],
                            package_dir=str(tmp_path / "sglang"))
    assert rep.ok and rep.prefill_loop == [4, 21, 37], [p.what for p in rep.problems]
    assert rep.source.startswith("newlm.py:NewLMForCausalLM:") and "language_model -> NewLMForCausalLM" in rep.source
    odd = layer_check.check({"architectures": ["OddForCausalLM"], "num_hidden_layers": 40}, _draft([3, 20, 36]),
                            "0.6.0", package_dir=str(tmp_path / "sglang"))
    assert not odd.ok and odd.problems[0].what.startswith("no verdict for OddForCausalLM in SGLang 0.6.0: ")
    assert "\n" not in odd.problems[0].what


def test_every_method_of_every_release_has_a_family_config():
    """Each set_eagle3_layers_to_capture any pinned release serves (the file:class that decides) is
    exercised by at least one config under families/, so a new family cannot go untested."""
    covered = set()
    for t in capture_rules.pinned().values():
        for cfg in CONFIGS.values():
            cap = t.get(cfg["architectures"][0])
            if cap is not None and cap.where:
                covered.add(cap.where.rsplit(":", 1)[0])
    needed = {c.where.rsplit(":", 1)[0] for t in capture_rules.pinned().values()
              for c in t.targets.values() if c.rule in capture_rules.RULES}
    assert needed - covered == set()
