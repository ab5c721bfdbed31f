#!/usr/bin/env python3
"""plot_metrics.py: plots one or more loom metrics.jsonl files (loss, tokens/s, time, and the
expert load of Mixture-of-Experts runs) to a PNG."""
import argparse
import json
import math
import os
import sys

USAGE_EPILOG = """examples:
  scripts/plot_metrics.py runs/quickstart                  # writes runs/quickstart/metrics.png
  scripts/plot_metrics.py runs/a runs/b --out compare.png  # two runs in one figure
Needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3)."""

TIME_KEYS = ["forward", "backward", "compute", "optimizer", "tp_comm", "pp_wait", "dp_comm", "cp_comm", "other"]  # stack order


def resolve(path):
    """(metrics file, run name) for a metrics.jsonl file or a run directory."""
    if os.path.isdir(path):
        f = os.path.join(path, "metrics.jsonl")
        run_dir = path
    else:
        f = path
        run_dir = os.path.dirname(path) or "."
    if not os.path.isfile(f):
        raise SystemExit(f"plot_metrics: error: no metrics file at '{f}'")
    name = os.path.basename(os.path.normpath(os.path.abspath(run_dir)))
    return f, run_dir, name


def load(f):
    """Train lines and eval lines by step; a later line for the same step (resume) wins."""
    train, evals, bad = {}, {}, 0
    with open(f, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                bad += 1  # e.g. the last line of a run that was killed mid-write
                continue
            if not isinstance(d, dict) or "step" not in d:
                continue
            if d.get("loss") is not None:
                train[d["step"]] = d
            if d.get("val_loss") is not None:
                evals[d["step"]] = d
    if bad:
        print(f"plot_metrics: warning: skipped {bad} unreadable line(s) in {f}", file=sys.stderr)
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def mean_time(train):
    """Mean ms per step of each key of the lines' "time" objects ({} when there are none)."""
    sums, counts = {}, {}
    for d in train:
        t = d.get("time")
        if not isinstance(t, dict):
            continue
        for k, v in t.items():
            if number(v):
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def tokens_per_step(runs):
    """The tokens per step shared by every train line of every run, else None."""
    seen = set()
    for r in runs:
        for d in r["train"]:
            if number(d.get("tokens")) and number(d.get("step")) and d["step"] > 0:
                seen.add(d["tokens"] / d["step"])
    return seen.pop() if len(seen) == 1 else None


def expert_load(train):
    """Per logged step of a Mixture-of-Experts run (lines with "moe"): (step, the busiest
    expert's share of the step's assignments, the fraction of assignments dropped), each the
    mean over layers. Uniform routing gives a share of 1/E; [] for a dense run."""
    out = []
    for d in train:
        moe = d.get("moe")
        if not isinstance(moe, dict) or not moe.get("tokens_per_expert"):
            continue
        shares, drops = [], []
        for i, layer in enumerate(moe["tokens_per_expert"]):
            total = sum(layer)
            if total <= 0:
                continue
            shares.append(max(layer) / total)
            dropped = moe.get("dropped") or []
            drops.append((dropped[i] if i < len(dropped) else 0) / total)
        if shares:
            out.append((d["step"], sum(shares) / len(shares), sum(drops) / len(drops)))
    return out


def human(v):
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Plot loom metrics.jsonl files (loss and val_loss vs step, tokens/s, and the "
        "per-step time breakdown when the lines carry one) into one PNG.",
        epilog=USAGE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories (holding metrics.jsonl) or files")
    ap.add_argument("--out", help="output PNG (default: <first run dir>/metrics.png)")
    ap.add_argument("--title", help="figure title (default: the run names)")
    args = ap.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        raise SystemExit("plot_metrics: error: matplotlib is missing; on Debian/Ubuntu: "
                         "apt-get install python3-matplotlib, then run with /usr/bin/python3")

    runs = []
    names = set()
    for p in args.runs:
        f, run_dir, name = resolve(p)
        if name in names:  # two runs with the same directory name: tell them apart
            name = os.path.normpath(run_dir)
        names.add(name)
        train, evals = load(f)
        if not train and not evals:
            print(f"plot_metrics: warning: no metrics lines in {f}", file=sys.stderr)
        runs.append({"name": name, "dir": run_dir, "train": train, "eval": evals})
    if not any(r["train"] or r["eval"] for r in runs):
        raise SystemExit("plot_metrics: error: nothing to plot")
    out = args.out or os.path.join(runs[0]["dir"], "metrics.png")

    times = [mean_time(r["train"]) for r in runs]
    has_time = any(times)
    loads = [expert_load(r["train"]) for r in runs]
    has_moe = any(loads)
    ncols = 2 + int(has_time) + int(has_moe)
    fig, axes = plt.subplots(1, ncols, figsize=(6.0 * ncols, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = ["o", "s", "^", "D", "v", "P", "X"]  # so identical curves stay visible

    def style(i, n_points):
        return {"color": colors[i % len(colors)],
                "marker": markers[i % len(markers)] if n_points < 60 else None,
                "markersize": 4, "markerfacecolor": "none" if i else None}

    ax = axes[0]
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        if r["train"]:
            ax.plot([d["step"] for d in r["train"]], [d["loss"] for d in r["train"]],
                    label=f"{r['name']} train", **style(i, len(r["train"])))
        if r["eval"]:
            ax.plot([d["step"] for d in r["eval"]], [d["val_loss"] for d in r["eval"]],
                    color=c, linestyle="--", marker="D", markersize=7, markerfacecolor="white",
                    markeredgewidth=1.5, zorder=3, label=f"{r['name']} validation")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.set_title("loss")
    per_step = tokens_per_step(runs)
    if per_step:  # the same tokens per step everywhere: a tokens scale on top
        top = ax.secondary_xaxis("top", functions=(lambda x: x * per_step,
                                                   lambda t: t / per_step))
        top.set_xlabel(f"tokens ({per_step:g} per step)", fontsize="small")
        top.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: human(v)))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")

    ax = axes[1]
    top_tps = 0.0
    for i, r in enumerate(runs):
        pts = [d for d in r["train"] if number(d.get("tokens_per_s"))]
        if not pts:
            continue
        mfu = [d["mfu"] for d in pts if number(d.get("mfu"))]
        label = r["name"]
        if mfu:
            label += f" (mean MFU {100.0 * sum(mfu) / len(mfu):.2g}%)"
        ax.plot([d["step"] for d in pts], [d["tokens_per_s"] for d in pts], label=label,
                **style(i, len(pts)))
        top_tps = max([top_tps] + [d["tokens_per_s"] for d in pts])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("tokens/s (whole job)")
    ax.set_title("throughput")
    ax.set_ylim(0, top_tps * 1.12 if top_tps > 0 else 1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")

    if has_time:
        ax = axes[2]
        keys = [k for k in TIME_KEYS if any(k in t for t in times)]
        keys += sorted({k for t in times for k in t} - set(keys))
        bottoms = [0.0] * len(runs)
        for j, k in enumerate(keys):
            vals = [t.get(k, 0.0) for t in times]
            ax.bar(range(len(runs)), vals, bottom=bottoms, label=k.replace("_", " "),
                   color=colors[j % len(colors)])
            bottoms = [b + v for b, v in zip(bottoms, vals)]
        for i, t in enumerate(times):
            if not t:
                ax.text(i, 0, "no time\nbreakdown", ha="center", va="bottom", fontsize="small",
                        color="gray")
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([r["name"] for r in runs], rotation=15)
        ax.set_ylabel("mean ms per step")
        ax.set_title("time per step")
        ax.legend(fontsize="small")

    if has_moe:  # Mixture of Experts: how evenly the router spreads the assignments
        ax = axes[-1]
        for i, pts in enumerate(loads):
            if not pts:
                continue
            st = style(i, len(pts))
            ax.plot([x[0] for x in pts], [x[1] for x in pts],
                    label=f"{runs[i]['name']} busiest expert", **st)
            if any(x[2] > 0 for x in pts):
                ax.plot([x[0] for x in pts], [x[2] for x in pts], linestyle=":",
                        color=st["color"], label=f"{runs[i]['name']} dropped")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("share of the step's assignments (mean over layers)")
        ax.set_title("expert load")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")

    fig.suptitle(args.title or ", ".join(r["name"] for r in runs))
    fig.tight_layout()
    out_dir = os.path.dirname(out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
