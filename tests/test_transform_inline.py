"""The libcst transform on inline before/after sources (libcst ``codemod`` assertCodemod style):
one case per patch kind and one per error message, no release download needed.

Specs are built from YAML-shaped dicts through the real loader (``spec._parse_patch``), so the
same validation runs as for ``patches/*.yaml``.
"""

from __future__ import annotations

import textwrap

import pytest

from sglang_eagle3_ext.patcher.transform import MARKER, transform_source
from sglang_eagle3_ext.runtime.probemap import _parse_patch

DOCS = {"why": "w", "how": "h", "upstream": "u", "removal": "r"}
IMPORT_PROBES = (
    f"try:  # {MARKER}: probe runtime; package absent -> every probe call is skipped\n"
    f"    from sglang_eagle3_ext.runtime import probes as _sglang_eagle3_probes  # {MARKER}\n"
    f"    _sglang_eagle3_probes.set_spec_config(route=\"source-patch\")  # {MARKER}\n"
    f"except Exception:  # {MARKER}\n"
    f"    _sglang_eagle3_probes = None  # {MARKER}\n"
)
IMPORT_LAYERS = (
    f"try:  # {MARKER}: aux-layer override; package absent -> SGLang's own layer ids\n"
    f"    from sglang_eagle3_ext.runtime import layers as _sglang_eagle3_layers  # {MARKER}\n"
    f"except Exception:  # {MARKER}\n"
    f"    _sglang_eagle3_layers = None  # {MARKER}\n"
)
P = "_sglang_eagle3_probes"


def spec(**d):
    return _parse_patch({**DOCS, **d}, "inline.yaml", None)


DECODE = dict(name="probes-t", kind="decode-probes", file="w.py", **{"class": "W"}, method="fwd",
              decode_branch=[{"if": "is_decode"}],
              anchors={"draft": {"call": "self.draft"}, "verify": {"call": "self.verify"}})


def run(source: str, *patches, options=None, version="0.5.23"):
    return transform_source("w.py", textwrap.dedent(source), list(patches), version, options or {})


def assert_codemod(before: str, after: str, *patches, options=None) -> None:
    res = run(before, *patches, options=options)
    assert res.errors == [], res.errors
    assert res.new_source == textwrap.dedent(after)


# ---------------------------------------------------------------------------------------------
# one case per kind

def test_decode_probes():
    res = run("""\
        import os


        class W:
            def fwd(self, batch):
                if batch.is_decode():
                    x = self.draft(batch)
                    y = self.verify(batch, x)
                    return y
                return None
        """, spec(**DECODE))
    assert res.errors == []
    g = f"if {P} is not None: {P}"
    assert res.new_source == "import os\n" + IMPORT_PROBES + textwrap.dedent(f"""\


        class W:
            def fwd(self, batch):
                if batch.is_decode():
                    {g}.cycle_begin()  # {MARKER}
                    {g}.phase_begin("draft")  # {MARKER}
                    x = self.draft(batch)
                    {g}.phase_end("draft")  # {MARKER}
                    {g}.phase_begin("verify")  # {MARKER}
                    y = self.verify(batch, x)
                    {g}.phase_end("verify")  # {MARKER}
                    {g}.cycle_end()  # {MARKER}
                    return y
                return None
        """)
    assert [i.what for i in res.inserted][:2] == ["guarded import of sglang_eagle3_ext.runtime.probes", "cycle_begin"]


METHOD_ENTRY = dict(name="aux-t", kind="method-entry", file="srt/models/*.py",
                    class_regex="(ForCausalLM)$", method="set_eagle3_layers_to_capture", module="layers",
                    param="layer_ids", requires_option="aux_layers",
                    statement="{param} = {mod}.override_layer_ids(self, {param}, {aux_layers}) "
                              "if {mod} is not None else {param}")


def test_method_entry_after_docstring_and_skips_inner_model():
    src = '''\
        class LlamaForCausalLM:
            def set_eagle3_layers_to_capture(self, layer_ids=None):
                """doc"""
                self.ids = layer_ids
        '''
    res = run(src, spec(**METHOD_ENTRY), options={"aux_layers": "2,30,58"})
    assert res.errors == []
    assert res.new_source == IMPORT_LAYERS + textwrap.dedent('''\
        class LlamaForCausalLM:
            def set_eagle3_layers_to_capture(self, layer_ids=None):
                """doc"""
                layer_ids = _sglang_eagle3_layers.override_layer_ids(self, layer_ids, '2,30,58') if _sglang_eagle3_layers is not None else layer_ids  # sglang-eagle3-ext
                self.ids = layer_ids
        ''')
    inner = run('''\
        class Qwen2MoeForCausalLM:
            def set_eagle3_layers_to_capture(self, layers_to_capture):
                self.c = layers_to_capture
        ''', spec(**METHOD_ENTRY), options={"aux_layers": "2,30,58"})
    assert inner.errors == [] and inner.new_source is None
    assert "skipped: first argument is not layer_ids" in inner.notes[0]


AFTER_ASSIGN = dict(name="acc-t", kind="after-assign", file="w.py", **{"class": "M"}, method="proc",
                    value="result.accept_lens.tolist()",
                    statement="if {mod} is not None: {mod}.record_accept({target}, bonus_included=True)")


def test_after_assign():
    res = run('''\
        class M:
            def proc(self, result):
                lens = result.accept_lens.tolist()
                return lens
        ''', spec(**AFTER_ASSIGN))
    assert res.errors == []
    assert res.new_source == IMPORT_PROBES + textwrap.dedent(f'''\
        class M:
            def proc(self, result):
                lens = result.accept_lens.tolist()
                if {P} is not None: {P}.record_accept(lens, bonus_included=True)  # {MARKER}
                return lens
        ''')


def test_unrelated_bytes_kept_exactly():
    """Comments, odd spacing and CRLF-free text outside the method come back byte for byte."""
    head = "# -*- coding: utf-8 -*-\nimport os  # spaced\nX  =  1   # spaced\n\n\n"
    src = head + textwrap.dedent('''\
        class M:
            def proc(self, result):
                lens = result.accept_lens.tolist()
        ''')
    res = transform_source("w.py", src, [spec(**AFTER_ASSIGN)], "0.5.23", {})
    assert res.new_source.startswith("# -*- coding: utf-8 -*-\nimport os  # spaced\n" + IMPORT_PROBES
                                     + "X  =  1   # spaced\n\n\n")


# ---------------------------------------------------------------------------------------------
# one case per error message

GOOD_DECODE = """\
    class W:
        def fwd(self, batch):
            if batch.is_decode():
                x = self.draft(batch)
                y = self.verify(batch, x)
                return y
    """


@pytest.mark.parametrize("source,patch,message", [
    (f"x = 1  # {MARKER}\n", DECODE, "already carries sglang-eagle3-ext insertions but is not in the manifest"),
    ("class W(:\n", DECODE, "cannot parse"),
    ("class W:\n    pass\nclass W:\n    pass\n", DECODE, "class W: found 2 times, expected 1"),
    ("class W:\n    def other(self):\n        pass\n", DECODE, "method fwd found 0 times, expected 1"),
    ("class W:\n    def fwd(self, b):\n        return 1\n", DECODE,
     "anchor 'decode branch' (if is_decode()) found 0 times, expected 1"),
    ("class W:\n    def fwd(self, b):\n        if b.is_decode(): return self.verify(b)\n", DECODE,
     "decode branch is a one-line suite"),
    (GOOD_DECODE.replace("x = self.draft(batch)", "x = 1"), DECODE,
     "anchor 'draft' (self.draft(...)) found 0 times in the decode branch, expected 1"),
    (GOOD_DECODE.replace("x = self.draft(batch)", "x = self.draft(self.draft(batch))"), DECODE,
     "anchor 'draft' (self.draft(...)) found 2 times in the decode branch, expected 1"),
    (GOOD_DECODE.replace("return y", "if y:\n                    return y\n                return None"), DECODE,
     "decode branch must end in its only return statement (found 2 returns)"),
    ("class W:\n    def fwd(self, b):\n        if b.is_decode():\n            x = self.draft(b)\n"
     "            y = self.verify(b)\n            return y\n",
     {**DECODE, "anchors": {"draft": {"call": "self.draft", "wrap": "with"}, "verify": {"call": "self.verify"}}},
     "anchor 'draft' (self.draft(...)) is not the only statement of a with-block"),
    (GOOD_DECODE, {**DECODE, "anchors": {"draft": {"call": "self.draft", "count": 2},
                                         "verify": {"call": "self.verify"}}},
     "found 1 times in the decode branch, expected 2"),
    (GOOD_DECODE, {**DECODE, "accept": {"fields": [{"versions": "<0.5.0", "field": "n"}]}},
     "anchor 'accept': no field listed for SGLang 0.5.23"),
    (GOOD_DECODE, {**DECODE, "accept": {"fields": [{"field": "num_correct"}]}},
     "anchor 'accept': verify_output.num_correct not used in the method (field renamed?)"),
    ("class M:\n    def proc(self, r):\n        return r\n", AFTER_ASSIGN,
     "anchor 'assignment = result.accept_lens.tolist()' found 0 times, expected 1"),
    ("class M:\n    def proc(self, result):\n        a.b = result.accept_lens.tolist()\n", AFTER_ASSIGN,
     "target is not a plain name"),
    ("class LlamaForCausalLM:\n    def set_eagle3_layers_to_capture(self, layer_ids):\n        pass\n"
     "    def set_eagle3_layers_to_capture(self, layer_ids):\n        pass\n",
     METHOD_ENTRY, "method set_eagle3_layers_to_capture found 2 times, expected 1"),
    ("class W:\n    def fwd(self, other):\n        pass\n",
     {**METHOD_ENTRY, "class": "W", "class_regex": None, "param": "layer_ids", "method": "fwd"},
     "anchor 'parameter layer_ids' not found (signature: self, other)"),
])
def test_error_messages(source, patch, message):
    res = run(source, spec(**patch), options={"aux_layers": "2,30,58"})
    assert res.new_source is None
    assert any(message in e for e in res.errors), res.errors
