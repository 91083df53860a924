# Regenerates tests/support/gdn2_oracle_case.h: the Gated DeltaNet-2 paper's chunkwise forward (App. A) and chunkwise
# backward (App. B), written as matrix products exactly as the paper prints them (gamma^-1 included; harmless at this
# size), in plain Python (no numpy) on deterministic inputs that tests/cpu/test_gated_delta_rule2.cpp rebuilds.
# Run: python3 tests/data/gdn2_paper_chunk_oracle.py > tests/support/gdn2_oracle_case.h && clang-format -i tests/support/gdn2_oracle_case.h
import math
L, dk, dv, C = 10, 3, 2, 4
def unit(row):
    n = math.sqrt(sum(x*x for x in row)); return [x/n for x in row]
q = [unit([math.sin(1.3*t + 0.7*i + 0.1) for i in range(dk)]) for t in range(L)]
k = [unit([math.cos(0.9*t - 0.4*i + 0.3) for i in range(dk)]) for t in range(L)]
v = [[math.sin(0.5*t + 1.1*j + 0.2) for j in range(dv)] for t in range(L)]
g = [[-0.3*(0.5 + 0.5*math.sin(0.8*t + 0.6*i)) for i in range(dk)] for t in range(L)]
b = [[0.5 + 0.45*math.cos(1.7*t + 0.9*i) for i in range(dk)] for t in range(L)]
w = [[0.5 + 0.45*math.sin(1.1*t - 0.5*j) for j in range(dv)] for t in range(L)]
S0 = [[math.cos(0.3*i + 0.8*j + 0.5) for j in range(dv)] for i in range(dk)]
dO = [[math.sin(0.4*t + 0.9*j - 0.2) for j in range(dv)] for t in range(L)]
dST = [[math.sin(1.4*i - 0.6*j + 0.7) for j in range(dv)] for i in range(dk)]

def mm(A, B): return [[sum(A[i][s]*B[s][j] for s in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]
def T_(A): return [list(r) for r in zip(*A)]
def add(A, B, c=1.0): return [[a + c*bb for a, bb in zip(ra, rb)] for ra, rb in zip(A, B)]
def had(A, B): return [[a*bb for a, bb in zip(ra, rb)] for ra, rb in zip(A, B)]
def tril(A, kk=0): return [[A[i][j] if j <= i + kk else 0.0 for j in range(len(A[0]))] for i in range(len(A))]
def inv_unit_lower(M):
    n = len(M); X = [[0.0]*n for _ in range(n)]
    for j in range(n):
        for r in range(n):
            x = (1.0 if r == j else 0.0) - sum(M[r][s]*X[s][j] for s in range(r)) if r >= j else 0.0
            X[r][j] = x
    return X

def chunk_fwd():
    S = [r[:] for r in S0]; O = []; cache = []
    for n0 in range(0, L, C):
        idx = list(range(n0, min(n0 + C, L))); c = len(idx)
        Q = [q[t] for t in idx]; K = [k[t] for t in idx]; V = [v[t] for t in idx]; B = [b[t] for t in idx]; W = [w[t] for t in idx]
        G = []; acc = [0.0]*dk
        for t in idx:
            acc = [a + x for a, x in zip(acc, g[t])]; G.append(acc[:])
        gam = [[math.exp(x) for x in r] for r in G]
        Kb = [[K[r][i]/gam[r][i] for i in range(dk)] for r in range(c)]
        Eb = [[gam[r][i]*B[r][i]*K[r][i] for i in range(dk)] for r in range(c)]
        Z = had(W, V)
        Tm = tril(mm(Eb, T_(Kb)), -1)
        A = inv_unit_lower(Tm)
        Y = mm(A, Eb); U = mm(A, Z)
        Qg = had(gam, Q)
        Aqk = tril(mm(Qg, T_(Kb)))
        Ktail = [[gam[-1][i]*Kb[r][i] for i in range(dk)] for r in range(c)]
        R = add(U, mm(Y, S), -1.0)
        O += add(mm(Qg, S), mm(Aqk, R))
        Snew = add([[gam[-1][i]*S[i][j] for j in range(dv)] for i in range(dk)], mm(T_(Ktail), R))
        cache.append(dict(Q=Q, K=K, V=V, B=B, W=W, gam=gam, Kb=Kb, Eb=Eb, Z=Z, A=A, Y=Y, Qg=Qg, Aqk=Aqk, Ktail=Ktail, R=R, S0=[r[:] for r in S], n0=n0, c=c))
        S = Snew
    return O, S, cache

def chunk_bwd(cache):
    out = {nm: [None]*L for nm in ['dq', 'dk', 'dv', 'dg', 'db', 'dw']}
    dSC = [r[:] for r in dST]
    for cc in reversed(cache):
        n0, c = cc['n0'], cc['c']; dOc = dO[n0:n0 + c]
        Q, K, V, B, W, gam = cc['Q'], cc['K'], cc['V'], cc['B'], cc['W'], cc['gam']
        Kb, Eb, Z, A, Y, Qg, Aqk, Ktail, R, S0c = (cc[x] for x in ['Kb', 'Eb', 'Z', 'A', 'Y', 'Qg', 'Aqk', 'Ktail', 'R', 'S0'])
        dAqk = tril(mm(dOc, T_(R)))
        dR = mm(T_(Aqk), dOc)
        dQg = mm(dOc, T_(S0c))
        dS0 = mm(T_(Qg), dOc)
        dR = add(dR, mm(Ktail, dSC))
        dKtail = mm(R, T_(dSC))
        dS0 = add(dS0, [[gam[-1][i]*dSC[i][j] for j in range(dv)] for i in range(dk)])
        dgamC = [sum(dSC[i][j]*S0c[i][j] for j in range(dv)) for i in range(dk)]
        dU = [r[:] for r in dR]
        dY = [[-x for x in r] for r in mm(dR, T_(S0c))]
        dS0 = add(dS0, mm(T_(Y), dR), -1.0)
        dA = add(mm(dU, T_(Z)), mm(dY, T_(Eb)))
        dZ = mm(T_(A), dU)
        dEb = mm(T_(A), dY)
        dT = [[-x for x in r] for r in tril(mm(mm(T_(A), dA), T_(A)), -1)]
        dEb = add(dEb, mm(dT, Kb))
        dKb = mm(T_(dT), Eb)
        dQg = add(dQg, mm(dAqk, Kb))
        dKb = add(dKb, mm(T_(dAqk), Qg))
        dKb = add(dKb, [[dKtail[r][i]*gam[-1][i] for i in range(dk)] for r in range(c)])
        dgamC = [dgamC[i] + sum(dKtail[r][i]*Kb[r][i] for r in range(c)) for i in range(dk)]
        dW = had(dZ, V); dV = had(dZ, W)
        dB = [[dEb[r][i]*gam[r][i]*K[r][i] for i in range(dk)] for r in range(c)]
        dK = [[dEb[r][i]*gam[r][i]*B[r][i] + dKb[r][i]/gam[r][i] for i in range(dk)] for r in range(c)]
        dgam = [[dEb[r][i]*B[r][i]*K[r][i] - dKb[r][i]*K[r][i]/gam[r][i]**2 + dQg[r][i]*Q[r][i] for i in range(dk)] for r in range(c)]
        dQ = had(dQg, gam)
        dgam[-1] = [a + x for a, x in zip(dgam[-1], dgamC)]
        dG = had(dgam, gam)
        dg = [None]*c; acc = [0.0]*dk
        for r in reversed(range(c)):
            acc = [a + x for a, x in zip(acc, dG[r])]; dg[r] = acc[:]
        for nm, val in zip(['dq', 'dk', 'dv', 'dg', 'db', 'dw'], [dQ, dK, dV, dg, dB, dW]):
            for r in range(c): out[nm][n0 + r] = val[r]
        dSC = dS0
    return out, dSC

print('// Generated by tests/data/gdn2_paper_chunk_oracle.py (the paper\'s App. A chunk forward and App. B chunk backward')
print('// in plain Python): o, S_T and the gradients of <dO, o> + <dST, S_T> for L = %d, K = %d, V = %d, chunk %d.' % (L, dk, dv, C))
print('#pragma once')
print('')
print('namespace primer::test::gdn2_oracle {')
print('')
O, S, cache = chunk_fwd()
grads, dS0 = chunk_bwd(cache)
def emit(name, rows):
    flat = [x for r in rows for x in r]
    print('inline constexpr double k%s[] = {%s};' % (name, ', '.join('%.17g' % x for x in flat)))
emit('O', O); emit('ST', S)
for nm in ['dq', 'dk', 'dv', 'dg', 'db', 'dw']: emit(nm.capitalize(), grads[nm])
emit('DS0', dS0)
print('')
print('}  // namespace primer::test::gdn2_oracle')
