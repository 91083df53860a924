#!/usr/bin/env python3
"""Per-kernel table of one profiled pass: reads the CSV that
`ncu --csv --page raw --metrics gpu__time_duration.sum[,...]` printed (bench_layer_kernels under
`--profile-from-start off`) and prints, as markdown, the kernels grouped by name (launches, total µs, share),
largest first, then the total. With --order it lists every launch in order instead (to map kernels to ops).

Where the CSV also holds DRAM bytes (dram__bytes_read.sum, dram__bytes_write.sum) and tensor-core op counts
(sm__ops_path_tensor_src_*.sum), as profile_kernels.sh asks with PROFILE_BYTES=1, each row adds what the kernel
achieved: DRAM bytes and their rate, and tensor ops per second; --copy-tbps and --tensor-tops turn those into
fractions of the device's ceilings (docs/perf.md: the copy bandwidth measured on the device, the dense peak)."""
import argparse
import csv
import re
import sys
from collections import OrderedDict

TIME = "gpu__time_duration.sum"
BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
TENSOR_PREFIX = "sm__ops_path_tensor_src_"
TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
COUNT_UNITS = {"": 1.0}


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


def number(text: str) -> float:
    return float(text.replace(",", "")) if text.strip() not in ("", "n/a") else 0.0


def read_launches(path: str):
    """Every launch as a dict: name, us and, where the CSV has them, bytes (DRAM, read + written) and tensor_ops."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages start with ==PROF== or ==WARNING==
    rows = list(csv.reader(lines))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header is None:
        sys.exit(f"kernel_table: {path} has no CSV header with 'Kernel Name' (was it written by ncu --csv --page raw?)")
    cols, units = rows[header], rows[header + 1] if header + 1 < len(rows) else []

    def column(metric, unit_scales):
        i = cols.index(metric)
        unit = units[i] if i < len(units) else ""
        if unit not in unit_scales:
            sys.exit(f"kernel_table: {path}: {metric} in unexpected unit '{unit}' (expected one of {sorted(unit_scales)})")
        return i, unit_scales[unit]

    name_col = cols.index("Kernel Name")
    if TIME not in cols:
        sys.exit(f"kernel_table: {path} has no {TIME} column")
    time_col, time_scale = column(TIME, TIME_UNITS)
    byte_cols = [column(m, BYTE_UNITS) for m in BYTES] if all(m in cols for m in BYTES) else []
    tensor_cols = [column(m, COUNT_UNITS) for m in cols if m.startswith(TENSOR_PREFIX) and m.endswith(".sum")]
    launches = []
    for r in rows[header + 2 :]:
        if len(r) != len(cols):
            continue
        launch = {"name": r[name_col], "us": number(r[time_col]) * time_scale}
        if byte_cols:
            launch["bytes"] = sum(number(r[i]) * s for i, s in byte_cols)
        if tensor_cols:
            launch["tensor_ops"] = sum(number(r[i]) * s for i, s in tensor_cols)
        launches.append(launch)
    return launches


def achieved(group, args):
    """The extra cells of a row (DRAM GB, TB/s, tensor Tops/s and their fractions) for launches that carry them."""
    cells = []
    seconds = group["us"] * 1e-6
    if "bytes" in group:
        tbps = group["bytes"] / seconds / 1e12 if seconds > 0 else 0.0
        cells += [f"{group['bytes'] / 1e9:.3f}", f"{tbps:.2f}"]
        if args.copy_tbps:
            cells.append(f"{100 * tbps / args.copy_tbps:.0f}%")
    if "tensor_ops" in group:
        tops = group["tensor_ops"] / seconds / 1e12 if seconds > 0 else 0.0
        cells.append(f"{tops:.0f}")
        if args.tensor_tops:
            cells.append(f"{100 * tops / args.tensor_tops:.0f}%")
    return cells


def achieved_header(sample, args):
    names = []
    if "bytes" in sample:
        names += ["DRAM GB", "TB/s"] + (["of copy"] if args.copy_tbps else [])
    if "tensor_ops" in sample:
        names += ["tensor Tops/s"] + (["of peak"] if args.tensor_tops else [])
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--order", action="store_true", help="every launch in order instead of grouped")
    ap.add_argument("--copy-tbps", type=float, default=0.0, help="the device's copy bandwidth, TB/s (fraction column)")
    ap.add_argument("--tensor-tops", type=float, default=0.0, help="the dense tensor peak, Tops/s (fraction column)")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    if not launches:
        sys.exit(f"kernel_table: {args.csv} lists no kernel launches")
    total = sum(launch["us"] for launch in launches)
    extra = achieved_header(launches[0], args)
    tail = "".join(f" {n} |" for n in extra)
    rule = "---:|" * len(extra)
    if args.order:
        print(f"| # | kernel | µs |{tail}\n|---:|---|---:|{rule}")
        for i, launch in enumerate(launches):
            cells = "".join(f" {c} |" for c in achieved(launch, args))
            print(f"| {i} | `{short_name(launch['name'])}` | {launch['us']:.1f} |{cells}")
        print(f"| | **all {len(launches)} kernels** | {total:.1f} |")
        return
    groups = OrderedDict()
    for launch in launches:
        group = groups.setdefault(short_name(launch["name"]), {"launches": 0})
        group["launches"] += 1
        for key in ("us", "bytes", "tensor_ops"):
            if key in launch:
                group[key] = group.get(key, 0.0) + launch[key]
    print(f"| kernel | launches | µs | share |{tail}\n|---|---:|---:|---:|{rule}")
    for name, group in sorted(groups.items(), key=lambda kv: -kv[1]["us"]):
        cells = "".join(f" {c} |" for c in achieved(group, args))
        print(f"| `{name}` | {group['launches']} | {group['us']:.1f} | {100 * group['us'] / total:.1f}% |{cells}")
    print(f"| **all kernels** | {len(launches)} | {total:.1f} | 100% |")


if __name__ == "__main__":
    main()
