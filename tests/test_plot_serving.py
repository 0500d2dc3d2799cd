"""Open-loop pictures: TTFT / ITL / TPOT (p50, p99) and goodput against the request rate, from
recorded open-loop files (docs/data/h100-2026-12-07-r19: three configs x three rates), and
`compare --plot` drawing them (checked before any reading)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.measure import compare, plot_base
from sglang_eagle3_ext.measure.plot_serving import series

R19 = Path(__file__).resolve().parents[1] / "docs" / "data" / "h100-2026-12-07-r19" / "r15m"
FILES = sorted(str(p) for p in R19.glob("*/serving-r*.json"))


def test_series_joins_a_labels_files_and_averages_repeats():
    docs = compare.load_serving_set(FILES)
    s = series(docs)
    assert sorted(s) == ["ema-scan-moe", "policy-cal-moe", "static7-moe"]
    assert all(list(by) == [1.0, 3.0, 8.0] for by in s.values())  # one file a rate, in rate order
    one = next(d for d in docs if d["label"] == "static7-moe" and d["rates"][0]["request_rate"] == 1.0)
    f = s["static7-moe"][1.0]
    summ = one["rates"][0]["summary"]
    assert f["ttft_ms_p99"] == summ["ttft_ms"]["p99"] and f["tpot_ms_p50"] == summ["tpot_ms"]["p50"]
    assert f["goodput"] == summ["goodput"]["request_goodput"] and f["runs"] == 1
    # the same file twice: two runs at that rate, averaged; an "inf" rate sorts last
    twin = copy.deepcopy(one)
    twin["rates"][0]["summary"]["ttft_ms"]["p50"] += 10.0
    burst = copy.deepcopy(one)
    burst["rates"][0]["request_rate"] = "inf"
    s2 = series([one, twin, burst])
    assert list(s2["static7-moe"]) == [1.0, "inf"]
    assert s2["static7-moe"][1.0]["runs"] == 2
    assert s2["static7-moe"][1.0]["ttft_ms_p50"] == pytest.approx(summ["ttft_ms"]["p50"] + 5.0)


def test_picture_has_four_panels_and_a_log_ttft_axis(monkeypatch):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from sglang_eagle3_ext.measure.plot_serving import plot_serving

    plt.close("all")
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    buf = io.BytesIO()
    plot_serving(compare.load_serving_set(FILES), buf)
    assert buf.getvalue()[:4] == b"\x89PNG"
    fig = plt.gcf()
    monkeypatch.undo()
    axes = fig.axes
    assert [a.get_ylabel() for a in axes] == ["TTFT ms", "ITL ms (per token)", "TPOT ms", "goodput and completed req/s"]
    assert axes[0].get_yscale() == "log"  # p99 TTFT at 8 req/s is ~200x its p50 at 1 req/s
    assert all([t.get_text() for t in a.get_xticklabels()] == ["1", "3", "8"] for a in axes)
    (leg,) = fig.legends
    assert {"static7-moe", "p50", "p99", "goodput (met every SLO)"} <= {t.get_text() for t in leg.get_texts()}
    plt.close(fig)


def test_compare_plot_writes_the_picture(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "serving.png"
    assert cli.main(["compare", *FILES, "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in capsys.readouterr().out
    # --json keeps stdout JSON: the line goes to stderr
    assert cli.main(["compare", *FILES, "--plot", str(png), "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert f"wrote {png}" in cap.err


def test_compare_plot_refused_before_reading(tmp_path, capsys, monkeypatch):
    assert cli.main(["compare", *FILES, "--plot", str(tmp_path / "x.svg")]) == 2
    assert "give a .png file name" in capsys.readouterr().err
    assert cli.main(["compare", *FILES, "--plot", str(tmp_path)]) == 2  # a folder
    assert "--plot" in capsys.readouterr().err
    monkeypatch.setattr(plot_base, "missing_reason", lambda: "matplotlib is not installed")
    assert cli.main(["compare", str(tmp_path / "missing.json"), "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib is not installed" in err  # before the missing file is read


def test_bench_help_says_what_plot_draws(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "open loop: TTFT / ITL / TPOT p50, p99 and goodput against the request rate" in text
    assert "ladder only" not in text
