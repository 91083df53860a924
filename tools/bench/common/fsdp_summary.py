"""Pairs bench_fsdp's rows with fsdp2_peer.py's (same model, GPU count and ZeRO stage) and prints one Markdown table:
tokens/s per GPU, MFU and peak memory of each, primer's speed-up, and weak scaling (tokens/s per GPU at N GPUs over
1 GPU, same batch per GPU). Used by tools/multi-gpu-check.sh.
    python3 tools/bench/common/fsdp_summary.py ROWS.md"""
import re
import sys


def parse(path):
    runs = {}  # (model, gpus, stage) -> {"primer"|"fsdp2": (tok/s, mfu, peak GB)}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8:
            continue
        run, model, gpus, _, _, tok, mfu, peak = cells
        stage = re.search(r"ZeRO-(\d)", run)
        if not stage:
            continue
        who = "fsdp2" if run.startswith("PyTorch") else "primer"
        key = (model.lower(), int(gpus.split()[0]), int(stage.group(1)))
        runs.setdefault(key, {})[who] = (float(tok.rstrip("K")) * 1e3, mfu, float(peak.split()[0]))
    return runs


def main():
    runs = parse(sys.argv[1])
    print("| model | GPUs | ZeRO | primer tokens/s/GPU | FSDP2 tokens/s/GPU | primer / FSDP2 | primer MFU | FSDP2 MFU "
          "| primer peak GB | FSDP2 peak GB | weak scaling primer (FSDP2) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (model, gpus, stage), r in sorted(runs.items()):
        p, f = r.get("primer"), r.get("fsdp2")
        one = runs.get((model, 1, stage), {})

        def scaling(who):
            mine, base = r.get(who), one.get(who)
            return f"{100 * mine[0] / base[0]:.0f}%" if mine and base and gpus > 1 else "-"

        cells = [model, str(gpus), str(stage),
                 f"{p[0] / 1e3:.1f}K" if p else "-", f"{f[0] / 1e3:.1f}K" if f else "-",
                 f"{p[0] / f[0]:.2f}x" if p and f else "-", p[1] if p else "-", f[1] if f else "-",
                 f"{p[2]:.1f}" if p else "-", f"{f[2]:.1f}" if f else "-",
                 f"{scaling('primer')} ({scaling('fsdp2')})"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
