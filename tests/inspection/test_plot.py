"""``inspect --plot``: the PNG is written for heavy-tailed, uniform and single-length inputs and for
numeric tables, and what it draws (bins, bucket labels, the efficiency panel, value histograms,
float16 notes) equals figures computed here from the input itself; a missing matplotlib is one line."""

from __future__ import annotations

import csv
import json
import math
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovecraft_convert.inspection import inspect as inspect_fn
from lovecraft_convert.inspection.values import ValueHistogram
from tests.conftest import lovecraft

PNG = b"\x89PNG\r\n\x1a\n"
HEAVY_WORDS = 36_000


def _words_file(path, counts) -> np.ndarray:
    """Lines of ``n`` whitespace-separated 1-letter words; returns the byte length of each line."""
    with open(path, "w") as f:
        for n in counts:
            f.write(" ".join(["w"] * int(n)) + "\n")
    return np.array([max(0, 2 * int(n) - 1) for n in counts], dtype=np.int64)


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """Most lines under 2,000 words, a few up to 36,000."""
    rng = np.random.default_rng(7)
    counts = rng.lognormal(5.0, 0.8, size=4000).astype(np.int64).clip(1, 1999)
    counts[rng.choice(len(counts), 8, replace=False)] = rng.integers(5_000, HEAVY_WORDS, 8)
    counts[17] = HEAVY_WORDS
    p = tmp_path_factory.mktemp("plot") / "heavy.txt"
    return str(p), _words_file(p, counts)


def _image_size(path) -> tuple[int, int]:
    """(width, height) in pixels, read back by an image reader."""
    mpimg = pytest.importorskip("matplotlib.image")
    h, w = mpimg.imread(path).shape[:2]
    return w, h


@pytest.fixture
def figures(monkeypatch):
    """The figures draw_plot saves, kept for the test to look into."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def _texts(fig) -> list[str]:
    out = [t.get_text() for sub in fig.subfigs for t in sub.texts]
    out += [sub._suptitle.get_text() for sub in fig.subfigs if sub._suptitle is not None]
    for ax in fig.get_axes():
        out += [t.get_text() for t in ax.texts] + [ax.get_title()]
    return out


def _check_png(path, size: tuple[int, int]) -> None:
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == PNG and len(data) > 10_000
    assert _image_size(path) == size


def test_heavy_tail_log_axis_bucket_labels_and_efficiency_panel(heavy, tmp_path, figures):
    path, lengths = heavy
    png = tmp_path / "lengths.png"
    r = lovecraft("inspect", path, "--plot", str(png), "--num-buckets", "8", "--json")
    assert r.exit_code == 0, r.stderr
    _check_png(png, (1200, 360))
    ln = json.loads(r.stdout)["columns"][0]["lengths"]
    pb = ln["plot_bins"]
    assert pb["scale"] == "log" and pb["zero"] == 0
    edges = np.array(pb["edges"])
    assert edges[0] == lengths.min() and edges[-1] == lengths.max() + 1
    assert 60 < len(pb["rows"]) < 150  # fine bins over the whole range, bulk and tail
    # bin i holds lengths [edges[i], edges[i+1]): counted here from the lines themselves
    want = np.bincount(np.searchsorted(edges, lengths, side="right") - 1, minlength=len(edges) - 1)
    assert pb["rows"] == want.tolist()
    # the tail is on the axis: the longest line's bin is drawn, far right of the bulk
    assert pb["rows"][-1] >= 1 and edges[-1] > 10 * np.median(lengths)

    (fig,) = figures
    texts = _texts(fig)
    hist_ax = fig.get_axes()[0]
    assert hist_ax.get_xscale() == "log"
    # every boundary labelled with its bucket's rows and padding efficiency, computed here
    bounds = ln["buckets"]["boundaries"]
    lo = 0
    for b in bounds:
        sel = lengths[(lengths > lo) & (lengths <= b)] if lo else lengths[lengths <= b]
        eff = sel.sum() / (b * len(sel))
        label = f"≤{b:,}: {len(sel):,} rows, {eff:.0%} "
        assert label in texts or any("boundary labels too close" in t for t in texts), label
        lo = b
    drawn = [t for t in texts if t.startswith("≤")]
    assert len(drawn) >= len(bounds) - 2
    # the efficiency panel: K = 1, 2, 4, ... 32, the numbers inspect prints (one bucket computed here)
    assert sorted(int(k) for k in ln["efficiency_by_k"]) == [1, 2, 4, 8, 16, 32]
    for v in ln["efficiency_by_k"].values():
        assert f"{v:.1%}" in texts
    assert math.isclose(ln["efficiency_by_k"]["1"], lengths.sum() / (lengths.max() * len(lengths)), abs_tol=1e-6)
    eff_ax = fig.get_axes()[1]
    assert [t.get_text() for t in eff_ax.get_yticklabels()] == [f"K={k}" for k in (1, 2, 4, 8, 16, 32)]


def test_uniform_lengths_linear_axis(tmp_path, figures):
    rng = np.random.default_rng(1)
    lengths = _words_file(tmp_path / "u.txt", rng.integers(50, 151, size=3000))
    png = tmp_path / "u.png"
    rep = inspect_fn(str(tmp_path / "u.txt"), plot=str(png), num_buckets=4)
    _check_png(png, (1200, 360))
    pb = rep["columns"][0]["lengths"]["plot_bins"]
    assert pb["scale"] == "linear" and sum(pb["rows"]) == len(lengths)
    assert pb["edges"][0] == lengths.min() and pb["edges"][-1] >= lengths.max() + 1
    assert figures[0].get_axes()[0].get_xscale() == "linear"
    assert len([t for t in _texts(figures[0]) if t.startswith("≤")]) == 4


@pytest.mark.parametrize("length", [40, 0])
def test_single_length(tmp_path, figures, length):
    p = tmp_path / "s.txt"
    p.write_text(("x" * length + "\n") * 500)
    png = tmp_path / "s.png"
    rep = inspect_fn(str(p), plot=str(png))
    _check_png(png, (1200, 360))
    pb = rep["columns"][0]["lengths"]["plot_bins"]
    assert pb == {"scale": "linear", "edges": [length, length + 1], "rows": [500], "zero": 0}
    ax = figures[0].get_axes()[0]
    lo, hi = ax.get_xlim()
    assert lo < length < hi and hi - lo >= 4  # a sensible axis around the one length, not an empty one
    assert f"every row has length {length}: one bucket, no padding" in _texts(figures[0])


def test_empty_rows_on_a_log_axis_are_counted_apart(tmp_path):
    counts = [0] * 30 + [5] * 300 + [20] * 200 + [3000] * 2
    p = tmp_path / "z.txt"
    with open(p, "w") as f:
        f.writelines(("w " * n).strip() + "\n" for n in counts)
    rep = inspect_fn(str(p), plot=str(tmp_path / "z.png"))
    pb = rep["columns"][0]["lengths"]["plot_bins"]
    assert pb["scale"] == "log" and pb["zero"] == 30 and pb["edges"][0] == 1
    assert sum(pb["rows"]) == len(counts) - 30


@pytest.fixture(scope="module")
def numeric_csv(tmp_path_factory):
    rng = np.random.default_rng(5)
    n = 3000
    cols = {
        "label": rng.integers(0, 10, n),
        "x": rng.normal(size=n).round(6),
        "big": (rng.normal(size=n) * 1e5).round(1),
        "count": (rng.pareto(1.2, n) * 10).astype(np.int64),
    }
    p = tmp_path_factory.mktemp("plotnum") / "num.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(cols))
        for i in range(n):
            w.writerow([repr(v[i].item()) for v in cols.values()])
    return str(p), cols


def test_numeric_columns_get_value_histograms(numeric_csv, tmp_path, figures):
    path, cols = numeric_csv
    png = tmp_path / "num.png"
    rep = inspect_fn(path, plot=str(png))
    _check_png(png, (max(700, 300 * len(cols)), 290))
    by = {c["name"]: c for c in rep["columns"]}
    for name, v in cols.items():
        h = by[name]["value_histogram"]
        edges = np.array(h["edges"])
        want = np.bincount(np.searchsorted(edges, v.astype(np.float64), side="right") - 1, minlength=len(edges) - 1)
        assert h["rows"] == want.tolist() and h["values"] == len(v)
        assert len(h["rows"]) <= 64
        nz = v[v != 0].astype(np.float64)
        assert h["zeros"] == int((v == 0).sum())
        assert sum(h["positive"]) == int((nz > 0).sum()) and sum(h["negative"]) == int((nz < 0).sum())
    assert by["label"]["value_histogram"]["edges"] == list(range(11))  # integers: one bin per value
    assert by["x"]["value_histogram"]["view"] == "linear"
    assert by["count"]["value_histogram"]["view"] == "magnitude"  # a long tail: |x| by binade, log axis
    fig = figures[0]
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [f"{n} ({by[n]['dtype']})" for n in cols]
    assert axes[3].get_xscale() == "log"
    texts = _texts(fig)
    over = int((np.abs(cols["big"]) > 65504).sum())
    assert over > 0 and f"float16: {over:,} overflow, 0 flush to 0" in texts
    assert "float16: every value fits" in texts  # x
    assert any("float16's ±65504" in t for t in texts)
    # the float16 limit is drawn where the values cross it
    assert {line.get_xdata()[0] for line in axes[2].get_lines()} >= {-65504.0, 65504.0}


def test_wide_table_draws_the_first_columns_and_says_so(tmp_path, figures):
    rng = np.random.default_rng(2)
    p = tmp_path / "wide.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(23)])
        w.writerows(rng.normal(size=(200, 23)).round(3).tolist())
    inspect_fn(str(p), plot=str(tmp_path / "wide.png"), estimate=False)
    fig = figures[0]
    assert [ax.get_title() for ax in fig.get_axes() if ax.get_visible()] == [f"c{i} (float64)" for i in range(16)]
    assert any("the first 16 of 23 numeric columns" in t for t in _texts(fig))


def test_missing_matplotlib_is_one_line(heavy, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    png = tmp_path / "x.png"
    r = lovecraft("inspect", heavy[0], "--plot", str(png))
    assert r.exit_code == 2
    assert r.stderr == "Error: --plot needs matplotlib; pip install 'lovecraft-convert[plot]'\n"
    assert r.stdout == "" and not png.exists()


def test_plot_path_in_a_missing_folder_is_refused_first(heavy, tmp_path):
    png = tmp_path / "nope" / "x.png"
    r = lovecraft("inspect", heavy[0], "--plot", str(png))
    assert r.exit_code == 1
    assert r.stderr == f"Error: {png}: cannot write the plot (no folder {tmp_path / 'nope'}); check the path\n"


def test_nothing_to_draw(tmp_path):
    pytest.importorskip("matplotlib")
    np.save(tmp_path / "nan.npy", np.full(4, np.nan))
    r = lovecraft("inspect", str(tmp_path / "nan.npy"), "--plot", str(tmp_path / "n.png"))
    assert r.exit_code == 1
    assert (
        r.stderr == "Error: --plot: no text, sequence or numeric column to draw; the columns hold no values to plot\n"
    )
    assert not os.path.exists(tmp_path / "n.png")


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.lists(
        st.lists(st.one_of(finite, st.floats(-3, 3), st.just(0.0)), min_size=1, max_size=40), min_size=1, max_size=5
    ),
    integer=st.booleans(),
)
def test_value_histogram_is_exact(blocks, integer):
    """Counts equal a bincount of the values over the returned edges, however the bins merged."""
    arrays = [np.array(b, dtype=np.float64) for b in blocks]
    if integer:
        arrays = [np.clip(a, -(2.0**62), 2.0**62).astype(np.int64) for a in arrays]
    h = ValueHistogram(integer)
    for a in arrays:
        h.update(a)
    d = h.to_dict()
    v = np.concatenate(arrays).astype(np.float64)
    edges = np.array(d["edges"])
    assert len(d["rows"]) <= 64 and d["values"] == len(v)
    assert edges[0] <= v.min() and v.max() < edges[-1]
    want = np.bincount(np.searchsorted(edges, v, side="right") - 1, minlength=len(edges) - 1)
    assert d["rows"] == want.tolist()
    nz = v[v != 0]
    _, e = np.frexp(nz)
    assert d["zeros"] == len(v) - len(nz)
    for sign, key in ((1, "positive"), (-1, "negative")):
        got = dict(zip(d["exponents"], d[key], strict=True))
        sel = np.sign(nz) == sign
        for ex, n in zip(*np.unique(e[sel], return_counts=True), strict=True):
            assert got[int(ex)] == n
