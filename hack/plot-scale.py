#!/usr/bin/env python3
"""Plots `make bench-scale`'s CSV: each manager's peak RSS and its management API requests per second
at rest, against the number of clusters.

Usage: plot-scale.py target/bench-scale.csv docs/src/images/scale.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def draw(axes, series, ylabel: str, title: str) -> None:
    """One line per manager of (clusters, value) points."""
    for manager, points in sorted(series.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=manager)
    axes.set_xlabel("clusters")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.set_ylim(bottom=0)
    axes.legend()


def main(source: str, target: str) -> None:
    # Of runs with the same number of clusters (one of them to measure the cost of a Machine), the
    # one with the most Machines.
    runs = {}
    with open(source, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["manager"], int(row["clusters"]))
            if key not in runs or int(row["machines"]) > int(runs[key]["machines"]):
                runs[key] = row
    rss = defaultdict(list)
    requests = defaultdict(list)
    for (manager, n), row in runs.items():
        rss[manager].append((n, int(row["peak_rss_kib"]) / 1024))
        requests[manager].append((n, float(row["requests_per_s"])))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    draw(left, rss, "peak RSS (MiB)", "Memory")
    draw(right, requests, "management API requests/s at rest", "Requests at rest")
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"plot written to {target}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
