#!/usr/bin/env python3
"""A PyTorch peer of `synthetic_mqar` for Gated DeltaNet: the same task, model and schedule, written independently.

It answers one question: does a GDN block that is not primer's leave MQAR's plateau at T = 256 where primer's does
not (docs/mixers.md, "Synthetic tasks")? Everything follows tools/synthetic/mqar_task.h and synthetic_train.h:
- the task: `pairs` key-value pairs first (keys from the lower half of the vocabulary, values from the upper half),
  uniform noise after them, each pair queried once in shuffled order at a power-law position over
  [query_start, seq - 2] (later queries overwrite earlier ones), the value as the label at the query's position;
- the model: `layers` pre-norm blocks of the mixer and a SwiGLU, the LM head tied to the embedding, every weight
  N(0, 0.02); GDN as in "Gated Delta Networks" (Yang, Kautz and Hatamizadeh, 2024) and flash-linear-attention's
  GatedDeltaNet layer: short causal convolutions with SiLU on q, k, v, L2-normalised q and k, beta = sigmoid(b x),
  decay g = -exp(A_log) softplus(a x + dt_bias) with A ~ U(0, 16) and dt log-uniform in [1e-3, 0.1], the output
  RMS-normalised per head and gated by silu(g_proj x);
- training: AdamW (0.9, 0.999, weight decay 0.1), gradient norm clipped to 1, a constant learning rate, bf16
  autocast around the projections (the recurrence in f32).

`--rule linear` drops the delta rule's erasure (S_t = a_t S_{t-1} + beta_t k_t v_t^T): a gated linear attention
with the same block, as a control that needs no erasure to keep a pair.
The chunked recurrence is checked against the token-by-token one (f64) before training.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


def make_set(n, seq, pairs, vocab, query_start, alpha, gen):
    half = vocab // 2
    ids = torch.randint(0, vocab, (n, seq), generator=gen)
    labels = torch.full((n, seq), -100, dtype=torch.long)
    keys = torch.randint(0, half, (n, pairs), generator=gen)
    values = torch.randint(half, vocab, (n, pairs), generator=gen)
    ids[:, 0:2 * pairs:2] = keys
    ids[:, 1:2 * pairs:2] = values
    order = torch.argsort(torch.rand((n, pairs), generator=gen), dim=1)
    weights = torch.arange(1, seq - query_start, dtype=torch.float64).pow(-alpha)
    where = query_start + torch.multinomial(weights, n * pairs, replacement=True, generator=gen).view(n, pairs)
    rows = torch.arange(n)
    for q in range(pairs):
        pair = order[:, q]
        ids[rows, where[:, q]] = keys[rows, pair]
        labels[rows, where[:, q]] = values[rows, pair]
    return ids, labels


def recurrence_chunked(q, k, v, g, beta, scale, delta, chunk=64):
    """o_t = scale * S_t^T q_t with S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T (delta) or
    S_t = a_t S_{t-1} + beta_t k_t v_t^T, a_t = exp(g_t); q, k [B, H, T, K], v [B, H, T, V], g and beta [B, H, T].
    Per chunk, with G_t the decay's running sum from the chunk's start and w_s = beta_s e_s (e_s the delta rule's
    residual v_s - a_s S_{s-1}^T k_s), (I + L) W = beta V - (beta exp(G)) K S_0 with
    L_ts = beta_t exp(G_t - G_s) k_t.k_s for s < t."""
    B, H, T, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for c0 in range(0, T, chunk):
        qc, kc, vc = q[:, :, c0:c0 + chunk], k[:, :, c0:c0 + chunk], v[:, :, c0:c0 + chunk]
        gc, bc = g[:, :, c0:c0 + chunk], beta[:, :, c0:c0 + chunk]
        n = qc.shape[2]
        cum = gc.cumsum(-1)
        lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, -math.inf))
        if delta:
            strict = decay * bc[..., :, None] * (kc @ kc.transpose(-1, -2))
            strict = strict.masked_fill(torch.eye(n, dtype=torch.bool, device=q.device), 0)
            rhs = bc[..., None] * vc - (bc * cum.exp())[..., None] * (kc @ state)
            eye = torch.eye(n, dtype=q.dtype, device=q.device)
            w = torch.linalg.solve_triangular(eye + strict, rhs, upper=False, unitriangular=True)
        else:
            w = bc[..., None] * vc
        out.append(scale * (cum.exp()[..., None] * (qc @ state) + (decay * (qc @ kc.transpose(-1, -2))) @ w))
        to_end = (cum[..., -1:] - cum).exp()[..., None]
        state = cum[..., -1].exp()[..., None, None] * state + (to_end * kc).transpose(-1, -2) @ w
    return torch.cat(out, dim=2)


def recurrence_tokens(q, k, v, g, beta, scale, delta):
    B, H, T, K = q.shape
    state = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        kt, vt, a, b = k[:, :, t], v[:, :, t], g[:, :, t].exp()[..., None, None], beta[:, :, t][..., None]
        state = a * state
        write = vt - (state.transpose(-1, -2) @ kt[..., None])[..., 0] if delta else vt
        state = state + kt[..., :, None] * (b * write)[..., None, :]
        out.append(scale * (state.transpose(-1, -2) @ q[:, :, t][..., None])[..., 0])
    return torch.stack(out, dim=2)


def check_chunked(delta):
    gen = torch.Generator().manual_seed(7)
    B, H, T, K, V = 2, 3, 150, 16, 8
    q = F.normalize(torch.randn(B, H, T, K, generator=gen, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(B, H, T, K, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(B, H, T, V, generator=gen, dtype=torch.float64)
    g = -torch.rand(B, H, T, generator=gen, dtype=torch.float64) * 0.3
    beta = torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    err = (recurrence_chunked(q, k, v, g, beta, 0.5, delta) - recurrence_tokens(q, k, v, g, beta, 0.5, delta)).abs()
    assert err.max().item() < 1e-10, f"chunked recurrence differs from the token loop by {err.max().item():.3e}"


class ShortConv(nn.Module):
    def __init__(self, channels, size):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, size) * 0.02)

    def forward(self, x):  # [B, T, C], causal depthwise, then SiLU
        size = self.weight.shape[-1]
        y = F.conv1d(F.pad(x.transpose(1, 2), (size - 1, 0)), self.weight.to(x.dtype), groups=x.shape[-1])
        return F.silu(y.transpose(1, 2))


class GatedDeltaNet(nn.Module):
    def __init__(self, width, heads, head_dim, delta):
        super().__init__()
        self.heads, self.head_dim, self.delta = heads, head_dim, delta
        inner = heads * head_dim
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(width, inner, bias=False) for _ in range(3))
        self.q_conv, self.k_conv, self.v_conv = (ShortConv(inner, 4) for _ in range(3))
        self.a_proj = nn.Linear(width, heads, bias=False)
        self.b_proj = nn.Linear(width, heads, bias=False)
        self.A_log = nn.Parameter(torch.empty(heads).uniform_(0, 16).clamp_min(1e-4).log())
        dt = torch.exp(torch.empty(heads).uniform_(math.log(1e-3), math.log(0.1))).clamp_min(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.g_proj = nn.Linear(width, inner, bias=False)
        self.o_norm = nn.Parameter(torch.ones(head_dim))
        self.o_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        H, D = self.heads, self.head_dim

        def heads(y):
            return y.view(B, T, H, D).transpose(1, 2).float()

        q = F.normalize(heads(self.q_conv(self.q_proj(x))), dim=-1, eps=1e-6)
        k = F.normalize(heads(self.k_conv(self.k_proj(x))), dim=-1, eps=1e-6)
        v = heads(self.v_conv(self.v_proj(x)))
        g = (-self.A_log.exp() * F.softplus(self.a_proj(x).float() + self.dt_bias)).transpose(1, 2)
        beta = torch.sigmoid(self.b_proj(x).float()).transpose(1, 2)
        with torch.autocast("cuda", enabled=False):
            o = recurrence_chunked(q, k, v, g, beta, D ** -0.5, self.delta)
        o = o.transpose(1, 2)  # [B, T, H, D]
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * self.o_norm
        o = o * F.silu(self.g_proj(x).float().view(B, T, H, D))
        return self.o_proj(o.reshape(B, T, H * D).to(x.dtype))


class RMSNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(x.dtype)


class Block(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(args.width), RMSNorm(args.width)
        self.mixer = GatedDeltaNet(args.width, args.heads, args.head_dim, args.rule == "delta")
        self.gate_up = nn.Linear(args.width, 2 * args.ffn, bias=False)
        self.down = nn.Linear(args.ffn, args.width, bias=False)

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.width)
        self.blocks = nn.ModuleList(Block(args) for _ in range(args.layers))
        self.norm = RMSNorm(args.width)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.t().to(x.dtype)


@torch.no_grad()
def accuracy(model, ids, labels, batch):
    model.eval()
    right = total = 0
    for i in range(0, ids.shape[0], batch):
        x, y = ids[i:i + batch].cuda(), labels[i:i + batch].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = model(x).argmax(-1)
        mask = y != -100
        right += (pred[mask] == y[mask]).sum().item()
        total += mask.sum().item()
    model.train()
    return right / total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rule", choices=["delta", "linear"], default="delta")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--query-start", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--train-size", type=int, default=20000)
    p.add_argument("--val-size", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-steps", type=int, default=10000)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    check_chunked(True)
    check_chunked(False)
    gen = torch.Generator().manual_seed(args.seed)
    task = (args.seq, args.pairs, args.vocab, args.query_start, 0.1, gen)
    train_ids, train_labels = make_set(args.train_size, *task)
    val_ids, val_labels = make_set(args.val_size, *task)
    torch.manual_seed(args.seed)
    model = Model(args).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    print(f"MQAR peer ({args.rule} rule): {args.pairs} pairs, T {args.seq}, {args.layers} x width {args.width}, "
          f"{args.heads} heads x {args.head_dim}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params",
          flush=True)
    order, start, best = torch.randperm(args.train_size, generator=gen), time.time(), (0.0, 0)
    for step in range(args.max_steps):
        index = (step * args.batch) % args.train_size
        if step > 0 and index < args.batch:
            order = torch.randperm(args.train_size, generator=gen)
        rows = order[torch.arange(index, index + args.batch) % args.train_size]
        x, y = train_ids[rows].cuda(), train_labels[rows].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.max_steps:
            val = accuracy(model, val_ids, val_labels, 250)
            best = max(best, (val, step + 1))
            print(f"peer {args.rule} step {step + 1:5d} | loss {loss.item():.4f} | val acc {100 * val:6.2f}% | "
                  f"{time.time() - start:.1f} s", flush=True)
    print(f"| peer GDN ({args.rule} rule) | best val {100 * best[0]:.2f}% at step {best[1]} | "
          f"{time.time() - start:.0f} s |")


if __name__ == "__main__":
    main()
