#!/usr/bin/python3
"""Draws `lattn bench` results: throughput and roofline fraction against shape.

Usage: /usr/bin/python3 scripts/plot_bench.py BENCH.json OUT.png [--title TEXT]

BENCH.json is what `lattn bench -o json` prints (the C++ side only writes
JSON; `lattn bench --plot OUT.png` runs this script on it). Each row is one
benchmark case; the figure has two panels sharing the x axis (one tick per
case, labelled with its shape):
  * top: achieved GFLOP/s (bars, left axis) and GB/s (dots, right axis);
  * bottom: the fraction of the roofline reached, i.e. achieved / the
    ceiling that bounds the case (measured in the same run), 0..1.
Bars are coloured by phase and backend. Runs with Debian's interpreter and
python3-matplotlib (apt-get install python3-matplotlib).
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
    top.bar(x, gflops, color=[colour_of[group_of(r)] for r in rows])
    top.set_ylabel("GFLOP/s (bars)")
    right = top.twinx()
    right.plot(x, gbps, "o", color="black", markersize=4)
    right.set_ylabel("GB/s (dots)")
    top.set_title(args.title or "lattn bench: throughput and roofline fraction")

    fraction = [float(r.get("roofline_fraction", 0.0)) for r in rows]
    bars = bottom.bar(x, fraction, color=[colour_of[group_of(r)] for r in rows])
    bottom.bar_label(bars, labels=[f"{f:.2g}" for f in fraction], fontsize=7, padding=2)
    bottom.set_ylabel("fraction of roofline")
    # Scale to the data (small fractions must stay visible); the roofline (1.0)
    # is drawn when it is in range.
    top_of_axis = max(max(fraction) * 1.25, 0.01)
    bottom.set_ylim(0, top_of_axis)
    if top_of_axis >= 1.0:
        bottom.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    bottom.set_xticks(x)
    bottom.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)

    handles = [plt.Rectangle((0, 0), 1, 1, color=colour_of[g]) for g in groups]
    top.legend(handles, [f"{p} / {b}" for p, b in groups], loc="upper left", fontsize=8)

    ceilings = data.get("ceilings", {})
    if ceilings:
        text = ", ".join(f"{k} {v:.4g}" for k, v in ceilings.items() if isinstance(v, (int, float)))
        fig.text(0.01, 0.005, "ceilings (same run): " + text, fontsize=7)

    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(args.output, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
