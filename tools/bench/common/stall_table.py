#!/usr/bin/env python3
"""Where one kernel's warps wait, from Nsight Compute's per-instruction stall sampling: reads the CSV of
`ncu -i REPORT --page source --csv --print-source sass` (a report taken with `--set full`) and prints, as markdown,
the stall reasons' shares, the opcodes' shares with their executed counts, and the instructions with the most
samples (the two largest reasons of each). A spill store that waits on a load (`STL` under `long_sb`), a wgmma wait
(`WARPGROUP.DEPBAR`) or a barrier stands out at once."""
import argparse
import csv
import sys
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text: str) -> float:
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def read(path: str):
    with open(path, newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    header = next((i for i, r in enumerate(rows) if SAMPLES in r and "Source" in r), None)
    if header is None:
        sys.exit(f"stall_table: {path} has no '{SAMPLES}' column: export a --set full report with "
                 "--page source --csv --print-source sass")
    kernel = rows[0][1] if header > 0 and len(rows[0]) > 1 else "(kernel name not in the export)"
    names = rows[header]
    at = {name: i for i, name in enumerate(names)}
    reasons = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    instructions = []
    for r in rows[header + 1:]:
        if len(r) < len(names):
            continue
        instructions.append({
            "address": r[at["Address"]],
            "source": r[at["Source"]].strip(),
            "samples": number(r[at[SAMPLES]]),
            "executed": number(r[at[EXECUTED]]) if EXECUTED in at else 0.0,
            "reasons": {n[len("stall_"):]: number(r[at[n]]) for n in reasons},
        })
    return kernel, instructions


def opcode(source: str) -> str:
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", help="the source page's CSV")
    parser.add_argument("--top", type=int, default=20, help="instructions listed (default 20)")
    args = parser.parse_args()
    kernel, instructions = read(args.csv)
    total = sum(i["samples"] for i in instructions)
    if total == 0:
        sys.exit(f"stall_table: {args.csv} holds no stall samples")
    share = lambda v: f"{100 * v / total:.1f}%"  # noqa: E731

    print(f"**{kernel}**: {int(total):,} stall samples over {len(instructions):,} SASS instructions\n")
    reasons = Counter()
    for i in instructions:
        reasons.update(i["reasons"])
    print("| stall reason | samples | share |\n|---|---:|---:|")
    for name, v in reasons.most_common(10):
        if v > 0:
            print(f"| {name} | {int(v):,} | {share(v)} |")

    samples, executed = Counter(), Counter()
    for i in instructions:
        samples[opcode(i["source"])] += i["samples"]
        executed[opcode(i["source"])] += i["executed"]
    print("\n| opcode | samples | share | executed (warp instructions) |\n|---|---:|---:|---:|")
    for name, v in samples.most_common(15):
        print(f"| `{name}` | {int(v):,} | {share(v)} | {int(executed[name]):,} |")

    print("\n| address | samples | share | executed | instruction | largest reasons |\n|---|---:|---:|---:|---|---|")
    for i in sorted(instructions, key=lambda i: -i["samples"])[: args.top]:
        largest = sorted(i["reasons"].items(), key=lambda kv: -kv[1])[:2]
        why = ", ".join(f"{name} {int(v)}" for name, v in largest if v > 0)
        text = i["source"].replace("|", "\\|")
        print(f"| {i['address'][-6:]} | {int(i['samples']):,} | {share(i['samples'])} | {int(i['executed']):,} | "
              f"`{text}` | {why} |")


if __name__ == "__main__":
    main()
