#!/usr/bin/env python3
"""PyTorch SDPA at bench_attention's shapes (causal, bf16, [B, H, T, D], H = 16, D = 128 or --head-dim 64),
CUDA-event median timing, printed side by side with primer's figures parsed from bench_attention's "csv,..." lines
(run bench_attention with the same --head-dim).

Usage: python3 tools/bench/sdpa_peer.py [--ours bench_attention.log] [--head-dim 64]
"""
import argparse
import os

import torch
import torch.nn.functional as F

HEADS = 16
SEQ_LENS = [2048, 4096, 8192, 16384, 32768]


def median_ms(fn, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def sdpa_times(batch, seq, head_dim):
    shape = (batch, HEADS, seq, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), dout)

    return {"fwd": median_ms(forward), "fwd+bwd": median_ms(forward_backward)}


def read_ours(path):
    ours = {}
    if path:
        with open(path) as f:
            for line in f:
                if line.startswith("csv,"):
                    _, pass_name, batch, seq, ms = line.strip().split(",")
                    ours[(pass_name, int(batch), int(seq))] = float(ms)
    return ours


def main():
    parser = argparse.ArgumentParser()
    # tools/device-check.sh exports BENCH_LOG_DIR, where bench_attention's output already lies.
    default_ours = os.path.join(os.environ.get("BENCH_LOG_DIR", ""), "bench_attention.log")
    parser.add_argument("--ours", default=default_ours if os.path.exists(default_ours) else None,
                        help="bench_attention output holding csv,<pass>,<B>,<T>,<ms> lines")
    parser.add_argument("--head-dim", type=int, default=128, choices=[64, 128])
    args = parser.parse_args()
    ours = read_ours(args.ours)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, causal bf16 H={HEADS} D={args.head_dim}")
    print("| pass | shape | primer ms | primer TFLOP/s | SDPA ms | SDPA TFLOP/s | primer / SDPA |")
    print("|---|---|---|---|---|---|---|")
    for seq in SEQ_LENS:
        batch = max(1, 16384 // seq)
        fwd_flops = 2.0 * batch * HEADS * seq * seq * args.head_dim
        for pass_name, ms in sdpa_times(batch, seq, args.head_dim).items():
            flops = fwd_flops * (3.5 if pass_name == "fwd+bwd" else 1.0)
            sdpa_tf = flops / (ms * 1e-3) / 1e12
            mine = ours.get((pass_name, batch, seq))
            if mine is None:
                cells = ["-", "-", "-"]
            else:
                mine_tf = flops / (mine * 1e-3) / 1e12
                cells = [f"{mine:.3f}", f"{mine_tf:.1f}", f"{mine_tf / sdpa_tf:.2f}x"]
            print(f"| {pass_name} | B={batch} T={seq} | {cells[0]} | {cells[1]} | {ms:.3f} | {sdpa_tf:.1f} | {cells[2]} |")


if __name__ == "__main__":
    main()
