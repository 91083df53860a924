"""The installed peer for primer's core-op benchmarks: the same ops and shapes through PyTorch (bf16, eager),
timed with CUDA events (median of 30 after 5 warm-ups). Run on the GPU machine next to the C++ benchmarks:
    python3 tools/bench/torch_peer_ops.py
Prints a Markdown table: op, shape, median ms, and GB/s (same minimum-byte counts as the C++ benchmarks)
or TFLOP/s for matrix work."""
import torch
import torch.nn.functional as F

dev, bf16 = "cuda", torch.bfloat16


def median_ms(fn, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


rows = []


def bw(op, shape, fn, nbytes):
    ms = median_ms(fn)
    rows.append((op, shape, f"{ms:.3f}", f"{nbytes / ms / 1e6:.0f} GB/s"))


def flops(op, shape, fn, n):
    ms = median_ms(fn)
    rows.append((op, shape, f"{ms:.3f}", f"{n / ms / 1e9:.0f} TFLOP/s"))


def backward_of(out_fn, *inputs):
    out = out_fn()
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)


torch.manual_seed(0)
a, b = torch.randn(8192, 8192, device=dev, dtype=bf16), torch.randn(8192, 8192, device=dev, dtype=bf16)
flops("matmul bf16", "8192^3", lambda: a @ b, 2 * 8192**3)

src = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
bw("device copy", "2 GiB", lambda: dst.copy_(src), 2 * src.numel())

N, D = 16384, 4096
x = torch.randn(N, D, device=dev, dtype=bf16, requires_grad=True)
w = torch.randn(D, device=dev, dtype=bf16, requires_grad=True)
act = N * D * 2
bw("rmsnorm fwd", f"[{N}, {D}]", lambda: F.rms_norm(x, (D,), w, 1e-6), 2 * act)
bw("rmsnorm bwd (dx+dw)", f"[{N}, {D}]", backward_of(lambda: F.rms_norm(x, (D,), w, 1e-6), x, w), 3 * act)

xf = torch.randn(8192, 4096, device=dev, dtype=torch.float32)
xb = xf.to(bf16)
bw("cast f32 -> bf16", "[8192, 4096]", lambda: xf.to(bf16), 6 * xf.numel())
bw("cast bf16 -> f32", "[8192, 4096]", lambda: xb.to(torch.float32), 6 * xf.numel())

Fh = 11008
g = torch.randn(N, Fh, device=dev, dtype=bf16, requires_grad=True)
u = torch.randn(N, Fh, device=dev, dtype=bf16, requires_grad=True)
act = N * Fh * 2
bw("swiglu fwd", f"[{N}, {Fh}]", lambda: F.silu(g) * u, 3 * act)
bw("swiglu bwd", f"[{N}, {Fh}]", backward_of(lambda: F.silu(g) * u, g, u), 5 * act)

B, T, H, Dh = 4, 4096, 32, 128
q = torch.randn(B, T, H, Dh, device=dev, dtype=bf16)
pos = torch.arange(T, device=dev, dtype=torch.float32)
inv = 1.0 / (1e6 ** (torch.arange(0, Dh, 2, device=dev, dtype=torch.float32) / Dh))
ang = torch.outer(pos, inv)
cos = torch.cat([ang.cos(), ang.cos()], -1).to(bf16)[None, :, None, :]
sin = torch.cat([ang.sin(), ang.sin()], -1).to(bf16)[None, :, None, :]


def rope():
    x1, x2 = q[..., : Dh // 2], q[..., Dh // 2 :]
    return q * cos + torch.cat([-x2, x1], -1) * sin


bw("rope fwd (HF apply_rotary_pos_emb)", f"[{B}, {T}, {H}, {Dh}]", rope, 2 * q.numel() * 2)

for C in (4096, 6144):
    B, T, K = 4, 4096, 4
    xc = torch.randn(B, T, C, device=dev, dtype=bf16, requires_grad=True)
    wc = torch.randn(C, 1, K, device=dev, dtype=bf16, requires_grad=True)
    bc = torch.randn(C, device=dev, dtype=bf16, requires_grad=True)

    def conv():
        y = F.conv1d(xc.transpose(1, 2), wc, bc, padding=K - 1, groups=C)[..., :T]
        return F.silu(y).transpose(1, 2)

    act = B * T * C * 2
    bw("conv1d fwd (F.conv1d depthwise + SiLU)", f"[{B}, {T}, {C}] K={K}", conv, 2 * act)
    bw("conv1d bwd", f"[{B}, {T}, {C}] K={K}", backward_of(conv, xc, wc, bc), 3 * act)

N, D, V = 16384, 1024, 151936
h = torch.randn(N, D, device=dev, dtype=bf16, requires_grad=True)
W = (torch.randn(V, D, device=dev, dtype=bf16) * 0.02).requires_grad_(True)
tgt = torch.randint(0, V, (N,), device=dev)


def ce_step():
    loss = F.cross_entropy((h @ W.t()).float(), tgt)
    loss.backward()


torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
flops("linear + cross_entropy fwd+bwd (logits materialised)", f"N={N} D={D} V={V}", ce_step, 6 * N * D * V)
peak = (torch.cuda.max_memory_allocated() - base) / 2**30
rows.append(("  its peak extra memory", "", "", f"{peak:.2f} GiB"))

print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}")
print("| op | shape | median ms | rate |")
print("|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
