"""``inspect --plot``: a PNG that answers "where do my lengths fall, and what will buckets cost?".

For every text or sequence column, a row of two panels:

* the length histogram, on a log axis when the lengths have a long tail (else linear), with the
  median, p90, p99 and the longest length marked, and the ``--num-buckets`` boundaries drawn, each
  labelled with its bucket's rows and padding efficiency;
* the padding efficiency for K = 1, 2, 4, ... 32 buckets (the figures ``inspect`` prints).

At most ``MAX_LENGTH_ROWS`` such rows. For numeric columns, a small value histogram each (at most ``MAX_PANELS``; the figure says when
there are more), with the float16 range marked: a linear axis, or the values' magnitudes by binade
on a log axis when a linear one would squash them into a few bins.

Everything drawn comes from the bounded figures ``inspect`` gathers while streaming
(:mod:`.lengths`, :mod:`.values`), never from the rows themselves. matplotlib is imported here
only, and drawn with its Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import LovecraftError, OptionsError, OutputError

MAX_PANELS = 16  # numeric columns drawn; wider tables show the first ones and say so
MAX_LENGTH_ROWS = 8  # text and sequence columns drawn, likewise
PANELS_PER_ROW = 4
F16_MAX = 65504.0
F16_NORMAL = 2.0**-14  # smallest normal float16: below it, precision is lost (subnormals)
F16_TINY = 2.0**-24  # smallest subnormal float16: below about half of it, values become 0
BLUE, RED, GREY, ORANGE = "#4477aa", "#cc3311", "#777777", "#ee7733"


def require_matplotlib() -> None:
    """Raise the one-line error of a missing matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise OptionsError("--plot needs matplotlib", hint="pip install 'lovecraft-convert[plot]'") from None


def check_plot_path(path: str) -> None:
    """Refuse, before the pass over the input, a plot path whose folder is missing or read-only."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: cannot write the plot (no folder {folder})", hint="check the path")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{path}: cannot write the plot (folder {folder} is read-only)", hint="check the path")


def draw_plot(report: dict[str, Any], path: str) -> None:
    """Write the PNG of an inputs report of ``inspect`` (made with ``plot=True``) to ``path``."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = report.get("columns", [])
    var = [c for c in columns if c.get("lengths", {}).get("rows") and "plot_bins" in c["lengths"]]
    numeric = [c for c in columns if c.get("value_histogram", {}).get("values")]
    if not var and not numeric:
        raise LovecraftError(
            "--plot: no text, sequence or numeric column to draw", hint="the columns hold no values to plot"
        )
    shown = numeric[:MAX_PANELS]
    var_all, var = var, var[:MAX_LENGTH_ROWS]
    cols = min(PANELS_PER_ROW, len(shown))
    grid_rows = -(-len(shown) // PANELS_PER_ROW)
    heights = [3.6] * len(var) + ([2.3 * grid_rows + 0.6] if shown else [])
    width = 12.0 if var else max(7.0, 3.0 * cols)  # numeric panels keep a small size
    fig = Figure(figsize=(width, sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    subs = fig.subfigures(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
    for sub, c in zip(subs, var, strict=False):
        _lengths_row(sub, c)
    if len(var_all) > len(var):
        fig.suptitle(f"lengths of the first {len(var)} of {len(var_all)} text and sequence columns", fontsize=11)
    if shown:
        sub = subs[-1]
        axes = sub.subplots(grid_rows, PANELS_PER_ROW if var else cols, squeeze=False)
        for ax, c in zip(axes.flat, shown, strict=False):
            _values_panel(ax, c)
        for ax in list(axes.flat)[len(shown) :]:
            ax.set_visible(False)
        more = f" (the first {len(shown)} of {len(numeric)} numeric columns)" if len(numeric) > len(shown) else ""
        sub.suptitle(
            f"value histograms{more}\nred: beyond float16's ±65504 (overflow); orange: float16 subnormals,\n"
            "|x| < 6.1e-05 (less precision; below 3e-08 a value becomes 0)",
            fontsize=9,
        )
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise LovecraftError(f"{path}: cannot write the plot ({e.strerror})", hint="check the path") from None


# ------------------------------------------------------------------------------------------------
# lengths
# ------------------------------------------------------------------------------------------------


def _lengths_row(sub, c: dict[str, Any]) -> None:
    ln = c["lengths"]
    unit = c.get("length_unit") or ("bytes" if c["kind"] in ("string", "binary") else "elements")
    ax, eff = sub.subplots(1, 2, width_ratios=[3.3, 1])
    _histogram(ax, ln, unit)
    _efficiency(eff, ln)
    b = ln["buckets"]
    zero = ln["plot_bins"].get("zero")
    sub.suptitle(
        f"column '{c['name']}': {ln['rows']:,} rows, length in {unit}: median {ln['p50']:,}, p99 {ln['p99']:,}, "
        f"max {ln['max']:,}" + (f" ({zero:,} empty rows, length 0, are off the log axis)" if zero else "") + "\n"
        f"{b['k']} buckets pad to {b['efficiency']:.1%} efficiency (one bucket: {ln['efficiency_unbucketed']:.1%})",
        fontsize=10,
    )


def _histogram(ax, ln: dict[str, Any], unit: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    pb = ln["plot_bins"]
    edges, rows = pb["edges"], pb["rows"]  # bin i: lengths [edges[i], edges[i+1]), drawn centred on them
    xs = [e - 0.5 for e in edges]
    widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    ax.bar(xs[:-1], rows, width=widths, align="edge", color=BLUE, linewidth=0)
    top = max(rows)
    log = pb["scale"] == "log"
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_locator(LogLocator(base=10, subs="auto"))
        ax.set_xlim(xs[0], xs[-1] * 1.12)  # room for the last boundary's label
    elif len(edges) == 2:  # one length: a bar with room around it
        pad = max(3.0, 0.25 * edges[0])
        ax.set_xlim(max(-1.0, edges[0] - pad), edges[0] + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=7))
        ax.text(
            0.02,
            0.95,
            f"every row has length {edges[0]:,}: one bucket, no padding",
            transform=ax.transAxes,
            va="top",
            fontsize=9,
        )
    else:
        ax.set_xlim(xs[0], xs[-1] + 0.02 * (xs[-1] - xs[0]))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 or not log else ""))
    ax.set_ylim(0, top * 1.32)  # room for the labels above the bars
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    _mark_short(ax, xs, rows, log)
    ax.set_xlabel(
        f"length ({unit}){', log scale' if log else ''}; red: the bucket boundaries, each with its longest "
        "length, rows and padding efficiency"
    )
    ax.set_ylabel("rows")
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    _percentiles(ax, ln, log)
    _boundaries(ax, ln)


def _mark_short(ax, edges: list, counts: list, log: bool) -> None:
    """A mark on the axis under every bin too short to see (the tail), so that it shows."""
    top = max(counts)
    xs = [
        (a * b) ** 0.5 if log else (a + b) / 2
        for a, b, n in zip(edges, edges[1:], counts, strict=False)
        if 0 < n < top / 60
    ]
    if xs:
        ax.plot(xs, [0] * len(xs), "|", color=BLUE, markersize=9, markeredgewidth=1.5, clip_on=False)


def _percentiles(ax, ln: dict[str, Any], log: bool) -> None:
    """The median, p90, p99 and longest length: dotted lines, named above the axes (equal ones
    named together, near ones on two levels)."""
    import math

    marks: dict[int, list[str]] = {}
    for name, key in (("median", "p50"), ("p90", "p90"), ("p99", "p99"), ("max", "max")):
        if not (log and ln[key] == 0):
            marks.setdefault(ln[key], []).append(name)
    lo, hi = ax.get_xlim()
    scale = (lambda v: math.log(v)) if log else (lambda v: v)
    last = None
    level = 0
    for v, names in sorted(marks.items()):
        ax.axvline(v, color=GREY, linestyle=":", linewidth=1)
        frac = (scale(v) - scale(lo)) / (scale(hi) - scale(lo))
        level = 1 - level if last is not None and frac - last < 0.06 else 0
        last = frac
        ax.text(
            v,
            1.01 + 0.065 * level,
            " = ".join(names),
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=7,
            color=GREY,
        )


def _boundaries(ax, ln: dict[str, Any]) -> None:
    """The bucket boundaries, each labelled with its bucket's longest length, rows and padding
    efficiency; a label that would overlap the previous one is left out (its line stays)."""
    last_px = None
    dropped = 0
    for d in ln["buckets"]["detail"]:
        x = d["max_length"] + 0.5  # between the bucket's longest length and the next
        ax.axvline(x, color=RED, linewidth=1.2)
        px = ax.transData.transform((x, 0))[0]
        if last_px is not None and px - last_px < 11:
            dropped += 1
            continue
        last_px = px
        _marker_label(
            ax,
            x,
            0.985,
            f"≤{d['max_length']:,}: {d['rows']:,} rows, {d['efficiency']:.0%} ",
            va="top",
            fontsize=7,
            bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 0.5},
        )
    if dropped:
        ax.text(
            0.99,
            0.5,
            f"({dropped} boundary labels too close to show)",
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
            color=RED,
        )


def _efficiency(ax, ln: dict[str, Any]) -> None:
    table = sorted(((int(k), v) for k, v in ln["efficiency_by_k"].items()), key=lambda t: t[0])
    k = ln["buckets"]["k"]
    ys = list(range(len(table)))
    colors = [RED if kk == k else BLUE for kk, _ in table]
    ax.barh(ys, [v for _, v in table], color=colors, height=0.7)
    ax.set_yticks(ys, [f"K={kk}" for kk, _ in table])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.32)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
    for y, (_, v) in zip(ys, table, strict=True):
        ax.text(v + 0.02, y, f"{v:.1%}", va="center", fontsize=8)
    ax.set_title("padding efficiency by K buckets", fontsize=9)
    ax.set_xlabel("tokens / padded tokens")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


# ------------------------------------------------------------------------------------------------
# numeric columns
# ------------------------------------------------------------------------------------------------


def _values_panel(ax, c: dict[str, Any]) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    h = c["value_histogram"]
    floating = c["dtype"].startswith("float")
    if h["view"] == "magnitude":
        _magnitudes(ax, h, floating)
    else:
        edges, rows = h["edges"], h["rows"]
        shift = -0.5 if not floating else 0.0  # integers: a bar centred on its values
        widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        few = len(rows) <= 24
        ax.bar(
            [e + shift for e in edges[:-1]],
            rows,
            width=widths,
            align="edge",
            color=BLUE,
            edgecolor="white" if few else BLUE,
            linewidth=0.6 if few else 0,
        )
        lo, hi = edges[0] + shift, edges[-1] + shift
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=not floating))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
        if floating:
            for side in (-1, 1):
                edge = side * F16_MAX
                if lo < edge < hi:
                    ax.axvline(edge, color=RED, linewidth=1)
                if (side > 0 and hi > edge) or (side < 0 and lo < edge):
                    ax.axvspan(edge, hi if side > 0 else lo, color=RED, alpha=0.08, linewidth=0)
            if lo < F16_NORMAL and hi > -F16_NORMAL:
                ax.axvspan(max(lo, -F16_NORMAL), min(hi, F16_NORMAL), color=ORANGE, alpha=0.15, linewidth=0)
        ax.set_ylim(0, max(rows) * 1.2)  # room for the note
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.tick_params(labelsize=7)
    shape = f", {' x '.join(str(d) for d in c['shape'])} per row" if c.get("shape") else ""
    ax.set_title(f"{c['name']} ({c['dtype']}{shape})", fontsize=9)
    ax.set_xlabel("|value|, log scale, by binade" if h["view"] == "magnitude" else "value", fontsize=7)
    note = _f16_note(c) if floating else ""
    if h.get("infinite"):
        note += f"\n{h['infinite']:,} infinite"
    if note:
        ax.text(
            0.98,
            0.97,
            note.strip(),
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=6.5,
            color=RED,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1},
        )


def _short(v: float) -> str:
    """A tick label that stays short: 250k, -3M, 0.5, 3e-06."""
    a = abs(v)
    if a == 0:
        return "0"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div * 10 or (a >= div and suffix != "k"):
            return f"{v / div:g}{suffix}"
    if a < 1e-3:
        return f"{v:.0e}"
    return f"{v:g}"


def _magnitudes(ax, h: dict[str, Any], floating: bool) -> None:
    from matplotlib.ticker import LogLocator

    exps = h["exponents"]
    lefts = [2.0 ** (e - 1) for e in exps]
    widths = [2.0 ** (e - 1) for e in exps]  # [2**(e-1), 2**e)
    ax.bar(lefts, h["positive"], width=widths, align="edge", color=BLUE, linewidth=0, label="x > 0")
    ax.bar(
        lefts, h["negative"], width=widths, bottom=h["positive"], align="edge", color=ORANGE, linewidth=0, label="x < 0"
    )
    ax.set_xscale("log", base=10)
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
    lo, hi = lefts[0], 2.0 ** exps[-1]
    ax.set_xlim(lo, hi)
    counts = [p + n for p, n in zip(h["positive"], h["negative"], strict=True)]
    ax.set_ylim(0, max(counts) * 1.2)
    _mark_short(ax, [*lefts, hi], counts, True)
    if floating:
        for x, name in ((F16_MAX, "f16 max"), (F16_NORMAL, "f16 normal min"), (F16_TINY, "f16 subnormal min")):
            if lo < x < hi:
                ax.axvline(x, color=RED, linewidth=1)
                _marker_label(ax, x, 0.5, f"{name} ", va="center", fontsize=6)
        if hi > F16_MAX:
            ax.axvspan(F16_MAX, hi, color=RED, alpha=0.08, linewidth=0)
        if lo < F16_TINY:
            ax.axvspan(lo, F16_TINY, color=RED, alpha=0.08, linewidth=0)
    if any(h["negative"]):
        ax.legend(fontsize=6, loc="upper left", frameon=False)
    if h.get("zeros"):
        ax.text(
            0.02,
            0.80 if any(h["negative"]) else 0.97,
            f"{h['zeros']:,} zeros",
            transform=ax.transAxes,
            va="top",
            fontsize=6.5,
        )


def _f16_note(c: dict[str, Any]) -> str:
    f = c.get("float16")
    if not f:
        return "float16 already"
    if not f.get("overflow") and not f.get("flushed_to_zero"):
        return "float16: every value fits"
    return f"float16: {f.get('overflow', 0):,} overflow, {f.get('flushed_to_zero', 0):,} flush to 0"


def _marker_label(ax, x: float, y: float, text: str, **style) -> None:
    """A vertical red label left of the line at data ``x``, ``y`` in axes height (0..1)."""
    ax.text(x, y, text, transform=ax.get_xaxis_transform(), rotation=90, ha="right", color=RED, **style)
