"""`sgl-eagle3 report`: one self-contained HTML page of a scan, a sweep or bench results, from the
recorded data under docs/data (read, never written: the page goes to --out)."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.commands.report import default_out
from sglang_eagle3_ext.measure import plot_base
from sglang_eagle3_ext.measure.plot_report import build, gather

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
SCAN = DATA / "h200-2026-12-02-r8" / "8bp"
SWEEP = DATA / "h200-2026-11-29" / "run2" / "core"
LADDER_SWEEP = DATA / "h200-2026-12-01" / "8b-p08" / "p08"
SERVING = DATA / "h100-2026-12-07-r19" / "r15m"  # a scan file and three configs' open-loop files below it


class _Page(HTMLParser):
    """What a reader sees: the tables' rows (cell texts), the images' sources, every tag's links."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.imgs: list[str] = []
        self.tags: list[str] = []
        self.links: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        self.links += [v for k, v in a.items() if k in ("href", "src") and v and not v.startswith("data:")]
        if tag == "img":
            self.imgs.append(a["src"])
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _report(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(["report", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_scan_folder_page(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "scan.html"
    rc, text, _ = _report(capsys, SCAN, "--out", out)
    assert rc == 0 and f"wrote {out} (scan: 2 table(s), 2 picture(s)" in text
    page = _page(out)
    scan = json.loads((SCAN / "scan.json").read_text())
    # one row per main cell, each with the cell's rate; the best per batch size's rows marked
    rows = [r for r in page.rows if len(r) == 8 and r[0].isdigit()]
    assert len(rows) == len([c for c in scan["cells"] if c["bs"] == c["level"]]) == 18
    assert ["32", "5 steps", "295 / 10", "13.76", "4.12", "299.4 [275.6, 322.2]", "9581.1", "-"] in rows
    assert ["8", "5 steps", "508.4", "-"] in page.rows  # the best-per-tier table
    assert len(page.imgs) == 2 and all(s.startswith("data:image/png;base64,") for s in page.imgs)
    # self-contained: no script, no stylesheet link, no external source
    assert page.links == [] and "script" not in page.tags and "link" not in page.tags


def test_sweep_folder_page_with_ladders(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.html"
    rc, text, _ = _report(capsys, LADDER_SWEEP, "--out", out, "--title", "8B, six configs")
    assert rc == 0 and "sweep:" in text
    page = _page(out)
    assert "<title>8B, six configs</title>" in out.read_text()
    base = json.loads((LADDER_SWEEP / "results.json").read_text())["configs"][0]
    avg, peak = (base["bench"]["summary"]["decode_tok_s"][k] for k in ("avg", "peak"))
    assert base["name"] == "no-spec no-nccl" and base["baseline"]
    assert next(r for r in page.rows if r[0] == "no-spec no-nccl")[1:] == [f"{avg:.1f}", f"{peak:.1f}", "-", "—"]
    ladder_rows = [r for r in page.rows if len(r) == 8 and r[0] in ("1", "8", "32")]
    assert len(ladder_rows) == 18  # six configs x three levels
    assert len(page.imgs) == 3  # tok/s bars, phases, ladder


def test_folder_of_bench_files_and_a_scan(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "serving.html"
    rc, text, _ = _report(capsys, SERVING, "--out", out)
    assert rc == 0 and "(scan, serving:" in text
    page = _page(out)
    labels = {r[1] for r in page.rows if len(r) == 12 and r[0] in ("1", "3", "8")}
    assert {"ema-scan-moe", "policy-cal-moe", "static7-moe"} <= labels
    assert len(page.imgs) == 3  # scan grid, scan ladder, latency against rate


def test_files_one_by_one_and_the_default_place(tmp_path, capsys, monkeypatch):
    files = sorted(SERVING.glob("static7-moe/serving-*.json"))
    assert [k for k, _ in gather([str(f) for f in files])] == ["serving"]
    assert default_out([str(SCAN)]) == SCAN / "report.html"
    monkeypatch.chdir(tmp_path)
    assert default_out([str(f) for f in files]) == Path("report.html")
    rc, text, _ = _report(capsys, *files)
    assert rc == 0 and (tmp_path / "report.html").is_file()
    # the folder's own files are not listed twice: a sweep folder is its results.json
    assert gather([str(SWEEP)]) == [("sweep", [SWEEP / "results.json"])]


def test_labels_are_escaped(tmp_path):
    doc = json.loads(next(SERVING.glob("static7-moe/serving-r1-*.json")).read_text())
    doc["label"] = "<script>alert(1)</script> & co"
    f = tmp_path / "evil.json"
    f.write_text(json.dumps(doc))
    html = build([str(f)]).html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in html


def test_without_matplotlib_the_tables_stay(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plot_base, "missing_reason", lambda: "matplotlib is not installed: pip install x")
    out = tmp_path / "r.html"
    rc, text, err = _report(capsys, SCAN, "--out", out)
    assert rc == 0 and "0 picture(s)" in text and "note: pictures left out: matplotlib is not installed" in err
    page = _page(out)
    assert page.imgs == [] and len(page.rows) > 18
    assert "pictures left out: matplotlib is not installed" in out.read_text()


def test_bad_inputs_are_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.json").write_text("{}")
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something/1"}')
    bad = tmp_path / "bad"
    shutil.copytree(SWEEP, bad, ignore=shutil.ignore_patterns("configs"))
    (bad / "results.json").write_text('{"schema": "eagle3_sweep/1", "configs": 3}')
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    hidden = empty / "sub"
    hidden.mkdir()
    os.mkfifo(hidden / "results-pipe.json")  # a FIFO found in a search is skipped, never opened
    for argv, needle in (([tmp_path / "nope"], "no such file or folder"),
                         ([fifo, "--out", tmp_path / "x.html"], "not a regular file or a folder"),
                         ([empty, "--out", tmp_path / "x.html"], "no scan.json, sweep results.json or bench"),
                         ([other, "--out", tmp_path / "x.html"], "not a result of sgl-eagle3"),
                         ([bad, "--out", tmp_path / "x.html"], "results.json"),
                         ([SCAN, "--out", tmp_path], "a folder; give a file name such as " + str(tmp_path / "report.html"))):
        rc, _, err = _report(capsys, *argv)
        assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1 and needle in err, (argv, err)
        assert not (tmp_path / "x.html").exists()
    assert not re.search(r"Traceback", err)


def test_a_search_stops_at_its_limit(tmp_path, monkeypatch):
    from sglang_eagle3_ext.measure import plot_report

    monkeypatch.setattr(plot_report, "MAX_FILES", 3)
    for i in range(5):
        (tmp_path / f"{i}.json").write_text("{}")
    with pytest.raises(plot_report.UserError, match="more than 3 JSON files below it"):
        gather([str(tmp_path)])


def test_bench_and_ladder_files_each_get_a_section(tmp_path, capsys):
    """Closed-loop bench files and ladder files given together: one section each, their tables
    the ones `compare` prints."""
    pytest.importorskip("matplotlib")
    benches = sorted(SWEEP.glob("configs/*/bench.json"))
    ladders = sorted(LADDER_SWEEP.glob("configs/*/ladder.json"))
    out = tmp_path / "mixed.html"
    rc, text, _ = _report(capsys, *benches, *ladders, "--out", out)
    assert rc == 0 and "(ladder, bench: 2 table(s), 2 picture(s)" in text
    html = out.read_text()
    assert "concurrency ladders: 6 file(s)" in html and "bench results: 5 file(s)" in html
    page = _page(out)
    labels = {json.loads(f.read_text())["label"] for f in benches}
    assert labels <= {r[0] for r in page.rows if len(r) == 5}  # config, avg, peak, accept len, vs baseline
    assert len([r for r in page.rows if len(r) == 8 and r[0] in ("1", "8", "32")]) == 6 * 3
