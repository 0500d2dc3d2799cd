"""`sgl-eagle3 traffic` (tiny/traffic.py): open-loop traffic for tiny builds. Real code throughout:
real builds (tiny --paths, --regions, on CPU), their tokenizer through transformers, SGLang
bench_serving's own ShareGPT loader (release source, tests/bench_serving_src.py), our prompt
reader and the open-loop bench against the streaming stand-in."""

from __future__ import annotations

import json
import statistics

import bench_serving_src
import pytest
from standin_openai import StandIn

from sglang_eagle3_ext import cli, tiny
from sglang_eagle3_ext.measure import arrivals, open_loop
from sglang_eagle3_ext.measure.prompts import load_items
from sglang_eagle3_ext.tiny import paths, traffic

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> tiny.TinyModels:
    return tiny.build(tmp_path_factory.mktemp("tp"), 0.8, paths=6, device="cpu")


@pytest.fixture(scope="module")
def regions(tmp_path_factory) -> tiny.TinyModels:
    return tiny.build(tmp_path_factory.mktemp("tr"), 0.7, alternatives="0.5,0.3", regions="0.9,0.6,0.3",
                      device="cpu")


def _gen(root, tmp_path, *more: str) -> tuple[list[dict], str]:
    f = tmp_path / "t.json"
    assert cli.main(["traffic", "--build", str(root), "--out", str(f), *more]) == 0
    return json.loads(f.read_text()), str(f)


def test_lengths_vary_and_are_exact(chain, tmp_path, capsys):
    from transformers import AutoTokenizer

    items, _ = _gen(chain.root, tmp_path, "--requests", "150", "--seed", "3")
    assert "wrote" in capsys.readouterr().out
    tok = AutoTokenizer.from_pretrained(str(chain.target))
    pl = [it["prompt_len"] for it in items]
    ol = [it["output_len"] for it in items]
    assert len(items) == 150 and max(pl) <= 3000 and max(ol) <= 1024 and min(ol) >= traffic.MIN_OUTPUT
    # tens to thousands of prompt tokens; a long tail of answers
    assert min(pl) < 60 and max(pl) > 1000 and max(ol) > 4 * statistics.median(ol)
    for it in items[:40]:
        human, gpt = it["conversations"]
        assert human["from"] == "human" and gpt["from"] == "gpt"
        assert len(tok.encode(human["value"])) == it["prompt_len"]
        assert len(tok.encode(gpt["value"])) == it["output_len"]  # bench_serving's output length
    words = {it["expect"]["word"] for it in items}
    assert len(words) == 6  # every path walked
    # the same seed writes the same file, another seed another
    again, _ = _gen(chain.root, tmp_path, "--requests", "150", "--seed", "3")
    other, _ = _gen(chain.root, tmp_path, "--requests", "150", "--seed", "4")
    assert again == items and other != items


def test_expectations_are_the_builds_own(chain, tmp_path):
    """At 256 tokens each word's expectation is the one prompts-paths.jsonl gives it."""
    items, _ = _gen(chain.root, tmp_path, "--requests", "40", "--output-len", "256")
    rows = {json.loads(x)["word"]: json.loads(x) for x in
            (chain.root / paths.PROMPTS_FILE).read_text().splitlines()}
    for it in items:
        e = it["expect"]
        assert e["last_token"] == rows[e["word"]]["last_token"] and e["start"] == rows[e["word"]]["start"]
        assert e["accept_len"] == rows[e["word"]]["expected_accept_len_256"]
    # and they differ by request: the traffic is not one text
    assert len({it["expect"]["accept_len"]["4"] for it in items}) > 3


def test_regions_build_expectations_follow_the_region(regions, tmp_path):
    items, _ = _gen(regions.root, tmp_path, "--requests", "60", "--output-len", "200")
    by = {}
    for it in items:
        by.setdefault(it["expect"]["region"], set()).add(it["expect"]["accept_len"]["s3.k4.d13"])
    assert set(by) == {"easy", "medium", "hard"}
    assert min(by["easy"]) > max(by["medium"]) > 0 and min(by["medium"]) > max(by["hard"])


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_bench_serving_reads_the_same_requests(chain, tmp_path, version):
    """SGLang bench_serving's ShareGPT loader on the file, with the build's tokenizer: the same
    output lengths, and with the same seed the order our bench sends (--order shuffle)."""
    from transformers import AutoTokenizer

    items, f = _gen(chain.root, tmp_path, "--requests", "30")
    ns = bench_serving_src.load(version)
    ns["random"].seed(42)
    rows = ns["sample_sharegpt_requests"](f, 30, AutoTokenizer.from_pretrained(str(chain.target)))
    order = arrivals.request_order(30, 30, 42, "shuffle")
    assert [r.prompt for r in rows] == [items[i]["conversations"][0]["value"] for i in order]
    assert [r.output_len for r in rows] == [items[i]["output_len"] for i in order]
    assert [r.prompt_len for r in rows] == [items[i]["prompt_len"] for i in order]
    # our reader: one user turn each, its length and expectation carried
    got = load_items(f)
    assert [g.output_len for g in got] == [it["output_len"] for it in items]
    assert got[0].prompt == items[0]["conversations"][0]["value"] and got[0].meta["expect"] == items[0]["expect"]


def test_open_loop_bench_on_generated_traffic(chain, tmp_path):
    items, f = _gen(chain.root, tmp_path, "--requests", "12", "--output-len", "uniform:8,40")
    with StandIn(ttft_s=0.002, interval_s=0.0005, tokens_per_chunk=3, spec="sglext") as s:
        doc = open_loop.run_open_loop(open_loop.OpenLoopOptions(
            url=s.url, rates=[float("inf")], items=load_items(f), num_requests=12, warmup=0))
    reqs = doc["rates"][0]["requests"]
    assert [r["tokens"] for r in reqs] == [items[r["prompt_index"]]["output_len"] for r in reqs]
    assert all(r["meta"]["expect"]["accept_len"] for r in reqs)
    exp = doc["rates"][0]["summary"]["expected_accept_len"]
    toks = [r["tokens"] for r in reqs]
    want = sum(toks) / sum(t / r["meta"]["expect"]["accept_len"]["3"] for t, r in zip(toks, reqs, strict=True))
    assert exp["3"] == pytest.approx(want, abs=1e-4)


def test_bad_inputs_are_one_line(chain, tmp_path, capsys):
    oracle = tiny.build(tmp_path / "oracle", "oracle", device="cpu")
    cases = [
        (["--build", str(tmp_path)], "no tiny.json"),
        (["--build", str(oracle.root)], "no maps.json"),
        (["--build", str(chain.root), "--output-len", "lognormal:0,1"], "--output-len"),
        (["--build", str(chain.root), "--prompt-len", "x"], "--prompt-len"),
        (["--build", str(chain.root), "--max-prompt-len", "4000"], "context"),
        (["--build", str(chain.root), "--requests", "0"], "--requests"),
    ]
    for args, words in cases:
        rc = cli.main(["traffic", "--out", str(tmp_path / "x.json"), *args])
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and words in lines[0], (args, lines)
    assert not (tmp_path / "x.json").exists()


def _copy(chain, tmp_path, name: str = "b"):
    import shutil

    dst = tmp_path / name
    shutil.copytree(chain.root, dst)
    return dst


@pytest.mark.parametrize("name", ["tiny.json", "maps.json", paths.PROMPTS_FILE, "target/config.json"])
def test_out_never_overwrites_the_builds_own_files(chain, tmp_path, capsys, name):
    """Was: traffic --out BUILD/maps.json wrote the traffic over the build's maps (the build gone)."""
    b = _copy(chain, tmp_path)
    before = (b / name).read_bytes()
    rc = cli.main(["traffic", "--build", str(b), "--out", str(b / name), "--requests", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "part of the build" in err and (b / name).read_bytes() == before, err
    assert _gen(b, b, "--requests", "3")[0]  # another file in the build folder is fine


def _damage(b, case: str) -> None:
    maps, info = b / "maps.json", b / "tiny.json"
    m, i = json.loads(maps.read_text()), json.loads(info.read_text())
    if case == "f empty":
        m["f"] = []
    elif case == "f short":
        m["f"] = m["f"][:2]
    elif case == "f text":
        m["f"] = ["a"] * len(m["f"])
    elif case == "prompts not json":
        (b / paths.PROMPTS_FILE).write_text("{not json\n")
    elif case == "prompts no word":
        (b / paths.PROMPTS_FILE).write_text('{"path": 1, "last_token": 3}\n')
    elif case == "tree without markers":
        i["tree"] = {"regions": [{"name": "easy"}]}
        m["tree"] = {"rank": [0]}
    elif case == "paths a list":
        i["paths"] = {"prompts": 1}
        (b / paths.PROMPTS_FILE).write_text("[1, 2]\n")
    elif case == "no target":
        import shutil

        shutil.rmtree(b / "target")
    maps.write_text(json.dumps(m))
    info.write_text(json.dumps(i))


@pytest.mark.parametrize("case", ["f empty", "f short", "f text", "prompts not json", "prompts no word",
                                  "tree without markers", "paths a list", "no target"])
def test_a_damaged_build_is_one_line(chain, tmp_path, capsys, case):
    """Was: unexpected KeyError / IndexError / TypeError / JSONDecodeError ("a bug")."""
    b = _copy(chain, tmp_path)
    _damage(b, case)
    rc = cli.main(["traffic", "--build", str(b), "--out", str(tmp_path / "t.json"), "--requests", "5"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: --build") and "bug" not in err, (case, err)
    assert not (tmp_path / "t.json").exists()


def test_a_relative_build_without_target_never_asks_the_model_hub(chain, tmp_path, capsys, monkeypatch):
    """Was: transformers took `b/target` for a hub model id (50 s, then an unexpected OSError)."""
    b = _copy(chain, tmp_path)
    _damage(b, "no target")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    t0 = __import__("time").monotonic()
    rc = cli.main(["traffic", "--build", "b", "--out", "t.json", "--requests", "5"])
    err = capsys.readouterr().err
    assert rc == 2 and "no tokenizer in b/target" in err, err
    assert __import__("time").monotonic() - t0 < 30
    rc = cli.main(["traffic", "--build", "nowhere", "--out", "t.json"])
    assert rc == 2 and "nowhere: no such folder" in capsys.readouterr().err
