#!/usr/bin/env python3
"""Draw the benchmark suite's summary as grouped bar charts.

    python3 scripts/bench-chart.py OUT/summary.json OUT/suite.png

One panel per scenario (the peak RSS rows folded into one panel); in each,
one cluster of bars per dataset/codec/profile and one bar per tool, at the
median with the min-max range as an error bar. Scales are logarithmic where
the values span more than a factor of 20. Needs matplotlib.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def panels(summary):
    """Groups by panel title, in the summary's order."""
    out = {}
    for g in summary["groups"]:
        title = g["scenario"]
        label = "/".join(x for x in (g["dataset"], g["codec"], g["profile"]))
        if title.startswith("7."):
            label += "\n" + title.split(": ", 1)[-1]
            title = "7. peak RSS of the mounts"
        out.setdefault(title, {"metric": g["metric"], "clusters": []})
        out[title]["clusters"].append((label, g["rows"]))
    return out


def is_num(x):
    return isinstance(x, (int, float)) and not math.isnan(x) and x > 0


def draw(ax, title, metric, clusters, colors):
    tools = []
    for _, rows in clusters:
        for r in rows:
            if r["tool"] not in tools:
                tools.append(r["tool"])
    width = 0.8 / max(len(tools), 1)
    values = []
    for ci, (label, rows) in enumerate(clusters):
        by_tool = {r["tool"]: r for r in rows}
        for ti, tool in enumerate(tools):
            r = by_tool.get(tool)
            x = ci - 0.4 + width * (ti + 0.5)
            if r is None:
                continue
            med = r.get("median")
            if r.get("ok", 0) == 0 or not is_num(med):
                what = "n/a" if r.get("na") else "failed"
                ax.text(x, 0, what, rotation=90, ha="center", va="bottom", fontsize=6, color="gray",
                        transform=ax.get_xaxis_transform())
                continue
            lo, hi = r.get("min", med), r.get("max", med)
            ax.bar(x, med, width, color=colors[tool], yerr=[[med - lo], [hi - med]],
                   error_kw={"elinewidth": 0.6, "capsize": 1.5}, label=tool)
            values.append(med)
    ax.set_title(title, fontsize=9)
    unit = {"seconds": "s (lower is better)", "MB/s": "MB/s (higher is better)",
            "p50 s per read": "p50 s per read (lower is better)",
            "peak RSS MiB": "MiB (lower is better)",
            "MB from the origin": "MB from the origin (lower is better)"}.get(metric, metric)
    ax.set_ylabel(unit, fontsize=8)
    ax.set_xticks(range(len(clusters)))
    ax.set_xticklabels([c[0] for c in clusters], fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3, which="both")
    # One legend entry per tool, outside the bars.
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0),
              frameon=False)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bench-chart.py SUMMARY.json OUT.png")
    with open(sys.argv[1]) as f:
        summary = json.load(f)
    ps = panels(summary)
    if not ps:
        sys.exit("bench-chart.py: no results in " + sys.argv[1])
    tools = []
    for p in ps.values():
        for _, rows in p["clusters"]:
            for r in rows:
                if r["tool"] not in tools:
                    tools.append(r["tool"])
    # tarmount's rows in warm colours, the peers' in cool ones.
    warm = ["#d62728", "#ff7f0e", "#e377c2", "#8c564b", "#bcbd22"]
    cool = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#7f7f7f", "#aec7e8", "#98df8a", "#c5b0d5"]
    colors = {}
    nw = nc = 0
    for t in tools:
        if t.startswith("tarmount"):
            colors[t] = warm[nw % len(warm)]
            nw += 1
        else:
            colors[t] = cool[nc % len(cool)]
            nc += 1
    n = len(ps)
    widest = max(len(p["clusters"]) for p in ps.values())
    fig, axes = plt.subplots(n, 1, figsize=(max(9, 1.6 * widest + 4), 3.2 * n), squeeze=False)
    for ax, (title, p) in zip(axes[:, 0], ps.items()):
        draw(ax, title, p["metric"], p["clusters"], colors)
    date = dict(summary.get("meta") or []).get("date", "")
    fig.suptitle("tarmount benchmark suite " + date + " (median, min-max)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
