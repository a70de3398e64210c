#!/usr/bin/python3
"""Draws `lattn bench` results: throughput and roofline fraction against shape.

Usage: /usr/bin/python3 scripts/plot_bench.py BENCH.json OUT.png [--title TEXT]

BENCH.json is what `lattn bench -o json` prints (the C++ side only writes
JSON; `lattn bench --plot OUT.png` runs this script on it). Each row is one
benchmark case; the figure has two panels sharing the x axis (one tick per
case, labelled with its shape):
  * top: achieved GFLOP/s at the median time (bars, left axis; the whisker
    reaches the throughput of the fastest repeat: the min-median spread) and
    GB/s (dots, right axis);
  * bottom: the fraction of the roofline reached, i.e. achieved / the
    ceiling that bounds the case (measured in the same run), with the
    roofline (1.0) drawn; a fraction above 1 means the ceilings of that run
    were measured low (a noisy, shared machine) and is flagged in red.
Both axes start at 0. Bars are coloured by phase and backend and hatched when
the case is memory bound (plain: compute bound); the legend names every mark.
Runs with Debian's interpreter and python3-matplotlib (apt-get install
python3-matplotlib).
"""
import argparse
import json
import sys


def load_rows(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: no benchmark rows (expected the JSON of `lattn bench -o json`)")
    return data, rows


# Shape fields as the harness names them, and their short prefixes in labels.
SHAPE_FIELDS = [("heads", "H"), ("num_heads", "H"), ("batch", "B"), ("seq", "S"), ("seq_len", "S"),
                ("context", "ctx"), ("new_tokens", "new"), ("block_size", "p")]


def case_label(row):
    if row.get("name"):  # the harness names each case: "decode H16 B8 S4096 sq1 bs64 bf16/bf16 cpu"
        return str(row["name"])
    parts = [str(row.get("phase", "?"))]
    parts += [f"{short}{row[key]}" for key, short in SHAPE_FIELDS if row.get(key) not in (None, "", 0)]
    return " ".join(parts)


def group_of(row):
    return (str(row.get("phase", "?")), str(row.get("backend", "?")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", help="JSON written by `lattn bench -o json`")
    parser.add_argument("output", help="PNG file to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot_bench.py: matplotlib is not available ({e}); install python3-matplotlib", file=sys.stderr)
        return 2

    try:
        data, rows = load_rows(args.input)
    except (OSError, ValueError) as e:
        print(f"plot_bench.py: {e}", file=sys.stderr)
        return 2

    labels = [case_label(r) for r in rows]
    groups = sorted({group_of(r) for r in rows})
    colours = plt.get_cmap("tab10")
    colour_of = {g: colours(i % 10) for i, g in enumerate(groups)}
    x = list(range(len(rows)))

    width = max(8.0, 0.45 * len(rows) + 3)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 8), sharex=True)

    gflops = [float(r.get("gflops", 0.0)) for r in rows]
    gbps = [float(r.get("gbps", 0.0)) for r in rows]
    # Throughput of the fastest repeat: the same work in min_us instead of median_us.
    best = [g * float(r.get("median_us", 0.0)) / float(r["min_us"]) if float(r.get("min_us", 0.0)) > 0 else g
            for g, r in zip(gflops, rows)]
    memory_bound = [str(r.get("bound", "")).startswith("memory") for r in rows]
    hatch = ["//" if m else "" for m in memory_bound]
    colours_of_rows = [colour_of[group_of(r)] for r in rows]
    top.bar(x, gflops, color=colours_of_rows, hatch=hatch, edgecolor="white")
    # max(0, ...): with one repeat min == median, and rounding can leave -1e-15 (errorbar refuses negatives).
    top.errorbar(x, gflops, yerr=[[0] * len(rows), [max(0.0, b - g) for b, g in zip(best, gflops)]], fmt="none",
                 ecolor="dimgrey", capsize=3, linewidth=1)
    top.set_ylabel("GFLOP/s (bars)")
    top.set_ylim(bottom=0)
    right = top.twinx()
    right.plot(x, gbps, "o", color="black", markersize=4)
    right.set_ylabel("GB/s (dots)")
    right.set_ylim(bottom=0)
    top.set_title(args.title or "lattn bench: throughput and roofline fraction")

    fraction = [float(r.get("roofline_fraction", 0.0)) for r in rows]
    over = [f > 1.0 for f in fraction]
    bars = bottom.bar(x, fraction, color=colours_of_rows, hatch=hatch, edgecolor=["red" if o else "white" for o in over],
                      linewidth=[2 if o else 0.5 for o in over])
    bottom.bar_label(bars, labels=[f"{f:.2g}" for f in fraction], fontsize=7, padding=2)
    bottom.set_ylabel("fraction of roofline")
    # Scale to the data (small fractions must stay visible), from 0; the
    # roofline (1.0) is drawn when it is in range.
    top_of_axis = max(max(fraction) * 1.25, 0.01)
    bottom.set_ylim(0, top_of_axis)
    if top_of_axis >= 1.0:
        bottom.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    if any(over):
        bottom.text(0.5, 0.97, f"{sum(over)} case(s) above 1: this run's ceilings were measured low (noisy machine); "
                    "re-run with --pair-ceilings", transform=bottom.transAxes, ha="center", va="top", color="red",
                    fontsize=9, fontweight="bold")
    bottom.set_xticks(x)
    bottom.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)

    from matplotlib.lines import Line2D  # noqa: PLC0415  (matplotlib is imported above, lazily)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour_of[g]) for g in groups]
    names = [f"{p} / {b}" for p, b in groups]
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="lightgrey", edgecolor="white"),
                plt.Rectangle((0, 0), 1, 1, facecolor="lightgrey", hatch="//", edgecolor="white"),
                Line2D([], [], color="dimgrey", marker="_", markersize=8, linestyle="-"),
                Line2D([], [], color="black", marker="o", linestyle="none", markersize=4)]
    names += ["compute bound", "memory bound", "min-median spread (to the fastest repeat)", "GB/s (right axis)"]
    top.legend(handles, names, loc="upper left", fontsize=7)
    bottom_handles = [Line2D([], [], color="grey", linestyle="--", linewidth=0.8)]
    bottom_names = ["roofline (ceiling of the same run)"]
    if any(over):
        bottom_handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="red", linewidth=2))
        bottom_names.append("above 1: noisy ceilings")
    bottom.legend(bottom_handles, bottom_names, loc="upper right", fontsize=7)

    ceilings = data.get("ceilings", {})
    if ceilings:
        text = ", ".join(f"{k} {v:.4g}" for k, v in ceilings.items() if isinstance(v, (int, float)))
        fig.text(0.01, 0.005, "ceilings (same run): " + text, fontsize=7)

    fig.tight_layout(rect=(0, 0.02, 1, 1))
    try:
        fig.savefig(args.output, dpi=110)
    except OSError as e:
        print(f"plot_bench.py: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
