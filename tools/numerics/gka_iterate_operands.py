"""How the operand format of GKA's Chebyshev iteration limits its accuracy, emulated in numpy (f64 with rounding).

One chunk of 64 tokens after a prefix folded into the chunk-start state H_0, head_dim 128, ridge 0.02, r = 30: the
iteration the CUDA kernels run (core/ops/cuda/chebyshev_solve_iterate_wgmma.cu: X_0 = step·R, then
X <- X - step·ω·(H X + λX - R) + (ω - 1)(X - X_prev)), with each matvec formed as the kernels form it,
    H_t x_t = ζ_t (H_0 x_t) + Σ_{j ≤ t} e^{G_t - G_j} k_j (k_j · x_t),
and its operands X, H_0 and P = (X Kᵀ) ⊙ M rounded to the format a scheme gives them (the iterate itself stays
unrounded, as in the kernels' fp32 registers). Errors are against the same iteration in f64, on x itself and on a
readout x Σ_j k_j v_jᵀ (what the GLA sees of x: its part along the keys, which a query's large part off the keys'
span, amplified by up to κ = (1 + ridge)/ridge in x, must not drown).

Usage (numpy; the GPU machine has it): python3 tools/numerics/gka_iterate_operands.py SEED [decay|nodecay] [lowrank]
  nodecay: no forgetting gate and a 1024-token prefix (large ‖H‖); lowrank: keys spanning 16 of the 128 directions.
"""
import sys

import numpy as np

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
decay = len(sys.argv) <= 2 or sys.argv[2] != "nodecay"
lowrank = len(sys.argv) > 3 and sys.argv[3] == "lowrank"
rng = np.random.default_rng(seed)


def bf16(x):  # round to nearest even, through the f32 bits
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def fp16(x):
    return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def single(rounding):
    return lambda x: [rounding(x)]


def hi_lo(rounding):  # the pair the kernels stage: hi = r(x), lo = r(x - hi)
    def parts(x):
        hi = rounding(x)
        return [hi, rounding(np.asarray(x) - hi)]
    return parts


exact = single(lambda x: np.asarray(x, np.float64))

prefix, C, D = (192 if decay else 1024), 64, 128
ridge, num_iter = 0.02, 30
basis, _ = np.linalg.qr(rng.standard_normal((D, D)))
spectrum = np.where(np.arange(D) < 16, 1.0, 0.0) if lowrank else np.exp(-np.arange(D) / 12.0)


def keys(n):  # unit rows along a decaying spectrum, scaled by β in [0.3, 1]; bf16 values, as the layer's
    k = (rng.standard_normal((n, D)) * spectrum) @ basis.T
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    return bf16(k * rng.uniform(0.3, 1.0, (n, 1)))


log_decay = -0.01 - 0.05 * np.abs(rng.standard_normal(prefix + C)) if decay else np.zeros(prefix + C)
all_keys = keys(prefix + C)
H0 = np.zeros((D, D))
for t in range(prefix):
    H0 = np.exp(log_decay[t]) * H0 + np.outer(all_keys[t], all_keys[t])
K, G = all_keys[prefix:], np.cumsum(log_decay[prefix:])
# Unit queries with a part along the keys' span and an isotropic part (mostly off it).
q = 3 * (rng.standard_normal((C, D)) * spectrum) @ basis.T + rng.standard_normal((C, D))
q /= np.linalg.norm(q, axis=1, keepdims=True)

mask = np.array([[np.exp(G[t] - G[j]) if j <= t else 0.0 for j in range(C)] for t in range(C)])
zeta = np.exp(G)
norms = np.array([np.linalg.norm(zeta[t] * H0 + (K[: t + 1].T * mask[t, : t + 1]) @ K[: t + 1]) for t in range(C)])
readout_state = all_keys.T @ rng.standard_normal((prefix + C, D))


def iterate(x_parts, h_parts, p_parts, key_operand):
    Kop, Hs = key_operand(K), h_parts(H0)
    step, lam = 2 / ((1 + 2 * ridge) * norms), ridge * norms
    rho, omega = 1 / (1 + 2 * ridge), 2.0
    X, X_prev = step[:, None] * q, np.zeros_like(q)
    for _ in range(num_iter):
        omega = 1 / (1 - 0.25 * rho * rho * omega)
        xs = x_parts(X)
        Y, P = np.zeros_like(X), np.zeros((C, C))
        for i, xp in enumerate(xs):
            for j, hp in enumerate(Hs):
                if i + j <= 1:  # lo x lo left out, as in the kernels
                    Y += xp @ hp.T
            P += xp @ Kop.T
        Y *= zeta[:, None]
        for pp in p_parts(P * mask):
            Y += pp @ Kop
        residual = Y + lam[:, None] * X - q
        X, X_prev = X - step[:, None] * omega * residual + (omega - 1) * (X - X_prev), X
    return X


reference = iterate(exact, exact, exact, lambda k: k)
schemes = {
    "bf16 X, P; H_0 hi + lo (precise_iterate: false)": (single(bf16), hi_lo(bf16), single(bf16), lambda k: k),
    "bf16 hi + lo X, P, H_0 (precise mode)": (hi_lo(bf16), hi_lo(bf16), hi_lo(bf16), lambda k: k),
    "fp16 X, P, H_0, K": (single(fp16), single(fp16), single(fp16), fp16),
    "fp16 X, P, K; H_0 fp16 hi + lo": (single(fp16), hi_lo(fp16), single(fp16), fp16),
}
print(f"# seed {seed}, {'decay' if decay else 'no decay'}{', low-rank keys' if lowrank else ''}: "
      f"‖H_t‖_F {norms.min():.2f} .. {norms.max():.2f}, max |H_0| entry {np.abs(H0).max():.2f}")
for name, operands in schemes.items():
    X = iterate(*operands)
    x_err = np.linalg.norm(X - reference) / np.linalg.norm(reference)
    o, o_ref = X @ readout_state, reference @ readout_state
    print(f"{name:50s} x rel L2 {x_err:.2e}   readout rel L2 {np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref):.2e}")
