"""``inspect --plot``: a PNG of the length histograms with the suggested bucket boundaries."""

from __future__ import annotations

from typing import Any

from ..errors import LovecraftError


def draw_plot(report: dict[str, Any], path: str) -> None:
    """A PNG of each variable-length column's length histogram with the suggested boundaries."""
    try:
        import matplotlib
    except ImportError:
        raise LovecraftError(
            "--plot needs matplotlib", hint="pip install 'lovecraft-convert[plot]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cols = [c for c in report.get("columns", []) if c.get("lengths", {}).get("rows")]
    if not cols:
        raise LovecraftError(
            "--plot: no text or sequence column to draw", hint="the inputs hold fixed-size columns only"
        )
    fig, axes = plt.subplots(len(cols), 1, figsize=(9, 3.2 * len(cols)), squeeze=False)
    for ax, c in zip(axes[:, 0], cols, strict=True):
        ln = c["lengths"]
        hist = ln["histogram"]
        ax.bar(
            [h["lo"] for h in hist],
            [h["rows"] for h in hist],
            width=[h["hi"] - h["lo"] + 1 for h in hist],
            align="edge",
            color="#4477aa",
        )
        for b in ln["buckets"]["boundaries"]:
            ax.axvline(b + 1, color="#cc3311", linewidth=1)
        ax.set_title(
            f"'{c['name']}': {ln['rows']:,} rows; {ln['buckets']['k']} buckets, "
            f"padding efficiency {ln['buckets']['efficiency']:.1%}"
        )
        ax.set_xlabel("length")
        ax.set_ylabel("rows")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise LovecraftError(f"{path}: cannot write the plot ({e.strerror})", hint="check the path") from None
    finally:
        plt.close(fig)
