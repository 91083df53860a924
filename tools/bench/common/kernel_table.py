#!/usr/bin/env python3
"""Per-kernel table of one profiled pass: reads the CSV that
`ncu --csv --page raw --metrics gpu__time_duration.sum` printed (bench_layer_kernels under
`--profile-from-start off`) and prints, as markdown, the kernels grouped by name (launches, total µs, share),
largest first, then the total. With --order it lists every launch in order instead (to map kernels to ops)."""
import argparse
import csv
import re
import sys
from collections import OrderedDict


def short_name(name: str, width: int = 90) -> str:
    """The kernel's name without its parameter list, and template arguments cut at the second level."""
    name = re.sub(r"^void ", "", name)
    depth, out = 0, []
    for ch in name:
        if ch == "(" and depth == 0:
            break
        if ch == "<":
            depth += 1
            if depth == 2:
                out.append("<…")
        elif ch == ">":
            depth -= 1
            if depth == 1:
                out.append(">")
                continue
        if depth <= 1:
            out.append(ch)
    s = "".join(out).replace("primer::", "").replace("cuda_ops::", "")
    return s if len(s) <= width else s[: width - 1] + "…"


def read_launches(path: str):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages start with ==PROF== or ==WARNING==
    rows = list(csv.reader(lines))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header is None:
        sys.exit(f"kernel_table: {path} has no CSV header with 'Kernel Name' (was it written by ncu --csv --page raw?)")
    cols = rows[header]
    name_col, time_col = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
    unit = rows[header + 1][time_col] if header + 1 < len(rows) else ""
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit)
    if scale is None:
        sys.exit(f"kernel_table: {path}: unexpected time unit '{unit}' (expected nsecond, usecond or msecond)")
    return [(r[name_col], float(r[time_col].replace(",", "")) * scale) for r in rows[header + 2 :] if len(r) == len(cols)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--order", action="store_true", help="every launch in order instead of grouped")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    total = sum(t for _, t in launches)
    if args.order:
        print("| # | kernel | µs |\n|---:|---|---:|")
        for i, (name, t) in enumerate(launches):
            print(f"| {i} | `{short_name(name)}` | {t:.1f} |")
    else:
        groups = OrderedDict()
        for name, t in launches:
            n, s = groups.get(short_name(name), (0, 0.0))
            groups[short_name(name)] = (n + 1, s + t)
        print("| kernel | launches | µs | share |\n|---|---:|---:|---:|")
        for name, (n, s) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"| `{name}` | {n} | {s:.1f} | {100 * s / total:.1f}% |")
    print(f"| | **all {len(launches)} kernels** | {total:.1f} |" if args.order else f"| **all kernels** | {len(launches)} | {total:.1f} | 100% |")


if __name__ == "__main__":
    main()
