#!/usr/bin/env python3
"""ncu_summary.py: per-kernel totals of an Nsight Compute CSV (ncu --csv --print-units base with the
metrics gpu__time_duration.sum, dram__bytes_read.sum, dram__bytes_write.sum): launches, GPU time,
DRAM bytes and achieved bandwidth against a peak, kernels grouped by name, longest total first."""
import argparse
import collections
import csv


def short(name):
    # Template arguments and parameter lists make names long; keep the function and a hint of them.
    base = name.split("(")[0]
    return base if len(base) <= 70 else base[:67] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--bandwidth", type=float, default=3.35e12, help="bytes/s (H100 SXM datasheet)")
    args = ap.parse_args()
    lines = open(args.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print("ncu_summary: no CSV table in", args.csv)
        return
    rows = list(csv.reader(lines[start:]))
    head, body = rows[0], rows[1:]
    col = {n: head.index(n) for n in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    per_launch = collections.defaultdict(dict)
    names = {}
    for r in body:
        if len(r) < len(head):
            continue
        i = r[col["ID"]]
        names[i] = short(r[col["Kernel Name"]])
        try:
            per_launch[i][r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            pass
    t = collections.Counter()
    b = collections.Counter()
    n = collections.Counter()
    for i, m in per_launch.items():
        k = names[i]
        t[k] += m.get("gpu__time_duration.sum", 0.0) * 1e-9
        b[k] += m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
        n[k] += 1
    total = sum(t.values())
    print(f"\n### Kernel profile: {len(per_launch)} launches, {total * 1e3:.2f} ms of GPU time")
    print(f"| kernel | launches | total ms | share | mean us | DRAM GB | GB/s | % of {args.bandwidth / 1e12:.2f} TB/s |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for k, s in t.most_common(40):
        bw = b[k] / s if s > 0 else 0.0
        print(f"| {k} | {n[k]} | {s * 1e3:.3f} | {100 * s / total:.1f}% | {1e6 * s / n[k]:.1f} "
              f"| {b[k] / 1e9:.3f} | {bw / 1e9:.0f} | {100 * bw / args.bandwidth:.0f}% |")


if __name__ == "__main__":
    main()
