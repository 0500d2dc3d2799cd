"""SGLang 0.5.23's OWN argument resolution and checks, driven by sglang_check.sglang_check_many.

One child Python (SGLang imports cost 8-16 s) resolves several launch argvs built by the wrapper
against config-only model folders (tiny Llama target + LlamaForCausalLMEagle3 draft). No GPU:
the checker adds --device cuda when SGLang finds no accelerator (reference sglang-on-cpu.md 2a).
"""

from __future__ import annotations

import pytest
from conftest import requires_sglang, subprocess_env
from test_flags import write_model

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import flags, server, sglang_check

pytestmark = [pytest.mark.sglang, requires_sglang]
RESULTS: dict[str, dict] = {}


def test_sglang_own_checks(tmp_path):
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    draft = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)

    def argv(*extra: str, **kw) -> list[str]:
        c = server.LaunchConfig(model=str(target), draft=str(draft), steps=2, topk=1, draft_tokens=3, tp=8)
        for k, v in kw.items():
            setattr(c, k, v)
        c.extra_args = list(extra)
        return server.build_command(c, environ={})[0]

    base = argv()
    cases = {
        "ok": base,
        "ok_cpu": argv("--device", "cpu"),
        # what the wrapper refuses statically, sent straight to SGLang to see its own (poor) errors:
        "only_topk": [a for a in base if a not in ("--speculative-num-steps", "2")],
        "only_steps": base[:base.index("--speculative-eagle-topk")] + base[base.index("--tp-size"):],
        "rejection_topk4": argv("--speculative-use-rejection-sampling", steps=2, topk=4, draft_tokens=8),
        "unknown_flag": argv("--no-such-flag"),
        "silent_fixup": argv(draft_tokens=5),
        "window0": argv("--speculative-draft-window-size", "0"),
    }
    res = dict(zip(cases, sglang_check.sglang_check_many(list(cases.values()), env=subprocess_env()), strict=True))

    assert res["ok"]["ok"] and res["ok"]["device_added"]
    assert res["ok"]["resolved"]["speculative_num_draft_tokens"] == 3
    assert res["ok_cpu"]["ok"] and not res["ok_cpu"].get("device_added")
    assert res["ok_cpu"]["resolved"]["disable_overlap_schedule"] is True  # spec on CPU: no overlap

    # bare AssertionError (empty message) -> the failing SGLang source line names the problem
    r = res["only_topk"]
    assert not r["ok"] and r["type"] == "AssertionError" and r["message"] == ""
    line = sglang_check.check_message(r)
    assert "speculative_hook.py:" in line and "failed at" in line and "\n" not in line
    r = res["only_steps"]
    assert r["type"] == "TypeError" and "NoneType" in r["message"]
    assert "speculative_hook.py:" in sglang_check.check_message(r)
    r = res["rejection_topk4"]
    assert r["type"] == "ValueError" and "requires --speculative-eagle-topk=1" in r["message"]
    r = res["unknown_flag"]
    assert r["type"] == "ArgumentError" and "--no-such-flag" in r["message"]
    # SGLang's silent fix-up that the wrapper turns into an error (flags._check_spec_values)
    assert res["silent_fixup"]["ok"] and res["silent_fixup"]["resolved"]["speculative_num_draft_tokens"] == 3
    RESULTS.update(res)


def test_validate_turns_sglang_error_into_exit_2(tmp_path, monkeypatch):
    """The validate() path: a rule only SGLang knows (window size > 0) surfaces as UserError(2).
    Replays the real child result recorded by the test above (a second child would cost ~15 s)."""
    if "window0" not in RESULTS:
        pytest.skip("needs test_sglang_own_checks to run first")
    seen = []
    monkeypatch.setattr(sglang_check, "sglang_check_many",
                        lambda argvs, **kw: seen.append(argvs) or [RESULTS["window0"]])
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    draft = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)
    c = server.LaunchConfig(model=str(target), draft=str(draft), steps=2, topk=1, draft_tokens=3,
                            extra_args=["--speculative-draft-window-size", "0"])
    with pytest.raises(UserError) as ei:
        flags.validate(c, locate(), sglang_check=True)
    assert ei.value.exit_code == 2
    assert "SGLang rejects these arguments: ValueError: --speculative-draft-window-size must be positive" in str(ei.value)
    assert "\n" not in str(ei.value)
    assert seen and "--speculative-draft-window-size" in seen[0][0]
