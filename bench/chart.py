"""The PNG chart of a bench.compare run (matplotlib, no display needed).

One panel per table section (workload, and TLS), three to a row: calls/s on
top (median, with the min–max of the runs as error bars), server CPU per call
below, both on log scales; bars grouped by client, one colour per server.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

PER_ROW = 3  # sections side by side; more go on further rows

# Fixed colours so a server looks the same in every chart.
COLOURS = {
    "grpcio_sync": "#9e9e9e",
    "grpcio_aio": "#c7c7c7",
    "native_sync": "#1f77b4",
    "native_sync16": "#aec7e8",
    "native_aio": "#2ca02c",
    "native_aio_uvloop": "#98df8a",
    "lowlevel": "#ff7f0e",
    "ceiling": "#d62728",
    "grpcgo": "#8c564b",
    # The front's own transport (h2): a shade of the same server's hue.
    "native_sync_h2": "#393b79",
    "native_sync16_h2": "#9c9ede",
    "native_aio_h2": "#637939",
    "native_aio_uvloop_h2": "#b5cf6b",
    "lowlevel_h2": "#fdae6b",
    "ceiling_h2": "#ff9896",
    "grpcio_sync_tls": "#7f7f7f",
    "native_sync_tls": "#17becf",
}


def _calls(v: float, _pos=None) -> str:
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def _plain(v: float, _pos=None) -> str:
    return f"{v:g}"


def draw(
    path: Path,
    sections: Sequence[tuple[str, list[dict]]],
    server_names: dict,
    client_names: dict,
    title: str,
    subtitle: str = "",
) -> Optional[str]:
    """Writes the chart; returns None, or why it couldn't (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator
    except ImportError as e:
        return f"no chart: {e} (pip install -r tests/requirements.txt)"

    sections = [(name, rows) for name, rows in sections if rows]
    if not sections:
        return "no chart: nothing was measured"
    servers: list = []
    for _, rows in sections:
        for r in rows:
            if r["server"] not in servers:
                servers.append(r["server"])

    ncols = min(PER_ROW, len(sections))
    nrows = math.ceil(len(sections) / ncols)
    fig, grid = plt.subplots(2 * nrows, ncols, figsize=(5.0 * ncols + 0.8, 3.4 * 2 * nrows + 1.2), squeeze=False)
    for ax in grid.flat:
        ax.set_visible(False)
    for index, (name, rows) in enumerate(sections):
        calls_ax = grid[2 * (index // ncols)][index % ncols]
        cpu_ax = grid[2 * (index // ncols) + 1][index % ncols]
        clients = []
        for r in rows:
            if r["client"] not in clients:
                clients.append(r["client"])
        here = [s for s in servers if any(r["server"] == s for r in rows)]
        width = 0.8 / max(1, len(here))
        for metric, ax, scale in (("calls_per_s", calls_ax, 1.0), ("server_cpu_us_per_call", cpu_ax, 1e-3)):
            ax.set_visible(True)
            for i, s in enumerate(here):
                xs, ys, lo, hi = [], [], [], []
                for j, c in enumerate(clients):
                    row = next((r for r in rows if r["server"] == s and r["client"] == c), None)
                    if not row or not row[metric]:
                        continue
                    mr = row[metric]
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(mr["median"] * scale)
                    lo.append((mr["median"] - mr["min"]) * scale)
                    hi.append((mr["max"] - mr["median"]) * scale)
                if not xs:
                    continue
                ax.bar(
                    xs,
                    ys,
                    width,
                    yerr=[lo, hi] if metric == "calls_per_s" else None,
                    capsize=2,
                    color=COLOURS.get(s, None),
                    label=server_names.get(s, s),
                    edgecolor="black",
                    linewidth=0.3,
                )
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
            ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(_calls if metric == "calls_per_s" else _plain))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
            low = [b.get_height() for b in ax.patches if b.get_height() > 0]
            if low:
                ax.set_ylim(bottom=10 ** math.floor(math.log10(min(low) * 0.8)))
            ax.set_xticks(range(len(clients)))
            ax.set_xticklabels([client_names.get(c, c) for c in clients], fontsize=8)
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.set_axisbelow(True)
        calls_ax.set_title(name, fontsize=10)
        calls_ax.set_ylabel("calls/s (median, min–max)", fontsize=8)
        cpu_ax.set_ylabel("server CPU, s per 1,000 calls", fontsize=8)
    handles, labels = [], []
    for ax in grid.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    ncol = min(4, len(labels))
    legend_rows = math.ceil(len(labels) / ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title + ("\n" + subtitle if subtitle else ""), fontsize=10)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.1) / fig.get_figheight(), 1, 1 - 0.6 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
