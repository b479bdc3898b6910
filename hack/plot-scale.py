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


def main(source: str, target: str) -> None:
    rss = defaultdict(list)
    requests = defaultdict(list)
    with open(source, newline="") as f:
        for row in csv.DictReader(f):
            n = int(row["clusters"])
            rss[row["manager"]].append((n, int(row["peak_rss_kib"]) / 1024))
            requests[row["manager"]].append((n, float(row["requests_per_s"])))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for manager, points in sorted(rss.items()):
        points.sort()
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=manager)
    left.set_xlabel("clusters")
    left.set_ylabel("peak RSS (MiB)")
    left.set_title("Memory")
    left.legend()
    for manager, points in sorted(requests.items()):
        points.sort()
        right.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=manager)
    right.set_xlabel("clusters")
    right.set_ylabel("management API requests/s at rest")
    right.set_title("Requests at rest")
    right.set_ylim(bottom=0)
    right.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"plot written to {target}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
