"""The sweep's and ladder's pictures: labels never sit on each other or on the data.

Drawn from a recorded sweep (docs/data/h200-2026-11-29/run2/core: a baseline beside four step
counts, the case whose old picture put the baseline's label on an accept-length label), then the
text boxes of the rendered figure are compared.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sglang_eagle3_ext.documents.sweep_doc import load_results
from sglang_eagle3_ext.measure import compare

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
CORE = DATA / "h200-2026-11-29" / "run2" / "core" / "results.json"
LADDERS = DATA / "h200-2026-12-01" / "8b-p08" / "p08" / "results.json"

mpl = pytest.importorskip("matplotlib")


@pytest.fixture
def kept(monkeypatch):
    """The figures the plots draw, kept open (plt.close does nothing) so their layout can be read."""
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    yield plt
    monkeypatch.undo()
    plt.close("all")


def _boxes(fig):
    """Window extents of every visible, non-empty label (tick labels aside: they have their own axis)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ticks = {id(t) for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    return [(t.get_text(), t.get_window_extent(r)) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and id(t) not in ticks]


def _overlaps(boxes):
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:]
            if ba.overlaps(bb) and ba.width > 0 and bb.width > 0]


def test_tok_s_labels_do_not_overlap(kept):
    from sglang_eagle3_ext.measure.plot import plot_tok_s

    doc = load_results(CORE, missing_ok=False, folders=False)
    assert plot_tok_s(doc, io.BytesIO()) is not None
    fig = kept.gcf()
    boxes = _boxes(fig)
    texts = [t for t, _ in boxes]
    # the accept lengths of the four speculative configs and the baseline's figure are all there
    assert sum(t.startswith("AL") for t in texts) == 4 and any("847.8" in t for t in texts)
    assert _overlaps(boxes) == []
    # the legend (with the baseline's name) sits outside the axes, off the bars
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    assert not ax.get_legend().get_window_extent(r).overlaps(ax.get_window_extent(r))


def test_phases_legend_is_off_the_bars(kept):
    from sglang_eagle3_ext.measure.plot import plot_phases

    doc = load_results(CORE, missing_ok=False, folders=False)
    assert plot_phases(doc, io.BytesIO()) is not None
    fig = kept.gcf()
    r = fig.canvas.get_renderer()
    fig.canvas.draw()
    ax = fig.axes[0]
    assert not ax.get_legend().get_window_extent(r).overlaps(ax.get_window_extent(r))
    assert _overlaps(_boxes(fig)) == []


def test_ladder_legend_below_both_panels(kept, tmp_path):
    from sglang_eagle3_ext.measure.plot import plot_ladders

    docs = compare.load_ladders([str(LADDERS)])
    p = plot_ladders(docs, tmp_path / "sub" / "ladder.png")  # the folder is made
    assert p.stat().st_size > 10_000
    fig = kept.gcf()
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    (leg,) = fig.legends
    assert [t.get_text() for t in leg.get_texts()] == [d["label"] for d in docs]
    for ax in fig.axes:
        assert not leg.get_window_extent(r).overlaps(ax.get_window_extent(r))
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8", "32"]
    assert _overlaps(_boxes(fig)) == []


def test_sweep_plots_write_png_files(tmp_path):
    from PIL import Image

    from sglang_eagle3_ext.measure.plot import plots

    made = plots(load_results(CORE, missing_ok=False, folders=False), tmp_path)
    assert [p.name for p in made] == ["tok_s.png", "phases.png"]
    for p in made:
        with Image.open(p) as im:
            assert im.format == "PNG" and im.width > 600 and im.height > 400


def test_compare_plot_draws_ladders_and_bench_bars(tmp_path, capsys):
    from sglang_eagle3_ext import cli

    for src, name in ((LADDERS, "ladder.png"), (CORE, "bars.png")):  # a sweep with ladders; one without
        png = tmp_path / name
        assert cli.main(["compare", str(src), "--plot", str(png), "--markdown"]) == 0
        assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in capsys.readouterr().out


def test_sweep_report_ladder_marks_the_baseline(kept, tmp_path, capsys):
    """`sweep --report DIR --out NEW` on a recorded steps x concurrency sweep: the ladder's no-spec
    line is the grey dashed one, every other config solid."""
    from sglang_eagle3_ext import cli

    assert cli.main(["sweep", "--report", str(LADDERS.parent), "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / 'ladder.png'}" in capsys.readouterr().out
    fig = next(f for f in map(kept.figure, kept.get_fignums()) if f.texts and "ladder" in f.texts[0].get_text())
    styles = {line.get_label(): line.get_linestyle() for line in fig.axes[0].get_lines()}
    assert styles.pop("no-spec no-nccl") == "--" and set(styles.values()) == {"-"} and len(styles) == 5
