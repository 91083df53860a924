#!/usr/bin/env python3
"""PyTorch SDPA at bench_attention's shapes (causal, bf16, q [B, Hq, T, D], k and v [B, Hkv, T, D]), CUDA-event
median timing, printed side by side with primer's figures parsed from bench_attention's "csv,..." lines. It takes
bench_attention's shape options with the same defaults (16 heads of 128, T = 2048 ... 32768, 16,384 tokens); give
both the same ones.

Usage: python3 tools/bench/sdpa_peer.py [--ours bench_attention.log] [--head-dim 64] [--seq 4096 16384]
       [--tokens N | --batch B] [--heads H] [--kv-heads HKV]
"""
import argparse
import os

import torch
import torch.nn.functional as F


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


def sdpa_times(batch, seq, heads, kv_heads, head_dim):
    q = torch.randn((batch, heads, seq, head_dim), device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn((batch, kv_heads, seq, head_dim), device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    dout = torch.randn((batch, heads, seq, head_dim), device="cuda", dtype=torch.bfloat16)
    gqa = {"enable_gqa": True} if kv_heads != heads else {}

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
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
    parser.add_argument("--seq", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768],
                        help="tokens per sequence, one or more")
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per step: B = max(1, tokens / T)")
    parser.add_argument("--batch", type=int, default=0, help="sequences at every T (instead of --tokens)")
    parser.add_argument("--heads", type=int, default=16, help="query heads")
    parser.add_argument("--kv-heads", type=int, default=0, help="key/value heads, dividing --heads (default: --heads)")
    args = parser.parse_args()
    kv_heads = args.kv_heads or args.heads
    if args.heads % kv_heads:
        parser.error(f"--kv-heads {kv_heads} does not divide --heads {args.heads}")
    ours = read_ours(args.ours)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, causal bf16 Hq={args.heads} Hkv={kv_heads} "
          f"D={args.head_dim}")
    print("| pass | shape | primer ms | primer TFLOP/s | SDPA ms | SDPA TFLOP/s | primer / SDPA |")
    print("|---|---|---|---|---|---|---|")
    for seq in args.seq:
        batch = args.batch or max(1, args.tokens // seq)
        fwd_flops = 2.0 * batch * args.heads * seq * seq * args.head_dim
        for pass_name, ms in sdpa_times(batch, seq, args.heads, kv_heads, args.head_dim).items():
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
