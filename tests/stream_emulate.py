"""A numpy emulation of kernels_cuda/stream.cu's index math (no GPU): the per-lane loads, the k
permutation shared by both operands, the ldmatrix.trans row addresses and swizzle, the mma.sync
m16n8k16 fragment layouts (PTX ISA), the warp / split-K reduction and the masked stores. It follows
the kernel statement by statement so a wrong index shows up as a wrong product on the CPU."""
from __future__ import annotations

import numpy as np


def mma(acc, a, b):
    """acc[32][4] += A(16x16) B(16x8) from per-lane fragments a[32][4][2], b[32][2][2] (PTX layout)."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, q = l >> 2, l & 3
        for e in range(2):
            A[g, 2 * q + e] = a[l][0][e]; A[g + 8, 2 * q + e] = a[l][1][e]
            A[g, 2 * q + 8 + e] = a[l][2][e]; A[g + 8, 2 * q + 8 + e] = a[l][3][e]
            B[2 * q + e, g] = b[l][0][e]; B[2 * q + 8 + e, g] = b[l][1][e]
    D = A @ B
    for l in range(32):
        g, q = l >> 2, l & 3
        acc[l][0] += D[g, 2 * q]; acc[l][1] += D[g, 2 * q + 1]
        acc[l][2] += D[g + 8, 2 * q]; acc[l][3] += D[g + 8, 2 * q + 1]


def swz_key(kk, cpr):
    if cpr >= 8:
        return (((kk >> 3) & 3) << 1) | (kk & 1)
    if cpr == 4:
        return (kk >> 3) & 3
    return (kk >> 3) & 1


def run(A, B, layout, BM, BN, WARPS, STAGES, SPLIT_K):
    """C = A @ B (B [K,N] for nn, [N,K] for nt) the way the kernel computes it."""
    M, K = A.shape
    N = B.shape[1] if layout == "nn" else B.shape[0]
    bigb = M <= N
    nt = layout == "nt"
    R, T = (N, M) if bigb else (M, N)
    Xf = B.reshape(-1) if bigb else A.reshape(-1)
    Yf = A.reshape(-1) if bigb else B.reshape(-1)
    x_kcontig = not (bigb and not nt)
    MI, NI, CPR = BM // 16, BN // 8, BM // 8
    C = np.full((M, N), np.nan)
    gx, gy = -(-R // BM), -(-T // BN)
    nch = (K + 31) >> 5
    ws = np.zeros((SPLIT_K, gx * gy, BM * BN))

    def load_small(t, k0, ok):
        y = np.zeros(8)
        if not ok or t >= T or k0 >= K:
            return y
        if bigb or nt:
            return Yf[t * K + k0: t * K + k0 + 8].copy()
        return np.array([Yf[(k0 + e) * N + t] for e in range(8)])

    for bx in range(gx):
        for by in range(gy):
            for z in range(SPLIT_K):
                r0, t0 = bx * BM, by * BN
                c0, c1 = z * nch // SPLIT_K, (z + 1) * nch // SPLIT_K
                red = np.zeros((WARPS, BM * BN))
                ring = np.full(STAGES * (2 * MI + NI) * WARPS * 32 * 8, np.nan)
                for w in range(WARPS):
                    acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(NI)] for _ in range(MI)]
                    if x_kcontig:
                        # The private ring: slot piece p of stage st of thread tid at (st*PER+p)*THREADS+tid.
                        y_vec = bigb or nt
                        PER, THREADS = 2 * MI + (NI if y_vec else 0), WARPS * 32
                        mine = (c1 - c0 - w + WARPS - 1) // WARPS if c1 - c0 - w > 0 else 0

                        def issue(i_, st):
                            for l in range(32):
                                tid, g, q = w * 32 + l, l >> 2, l & 3
                                k = (c0 + w + i_ * WARPS) * 32 + q * 8
                                for i2 in range(MI):
                                    for h in range(2):
                                        r = r0 + i2 * 16 + g + h * 8
                                        o = ((st * PER + 2 * i2 + h) * THREADS + tid) * 8
                                        ring[o:o + 8] = Xf[r * K + k: r * K + k + 8] if (k < K and r < R) else 0
                                if y_vec:
                                    for j in range(NI):
                                        t = t0 + j * 8 + g
                                        o = ((st * PER + 2 * MI + j) * THREADS + tid) * 8
                                        ring[o:o + 8] = Yf[t * K + k: t * K + k + 8] if (k < K and t < T) else 0
                        for s_ in range(STAGES - 1):
                            if s_ < mine:
                                issue(s_, s_)
                        for i_ in range(mine):
                            st = i_ % STAGES
                            xa = np.zeros((32, MI, 2, 8)); yb = np.zeros((32, NI, 8))
                            for l in range(32):
                                tid, g, q = w * 32 + l, l >> 2, l & 3
                                for i2 in range(MI):
                                    for h in range(2):
                                        o = ((st * PER + 2 * i2 + h) * THREADS + tid) * 8
                                        xa[l, i2, h] = ring[o:o + 8]
                                for j in range(NI):
                                    if y_vec:
                                        o = ((st * PER + 2 * MI + j) * THREADS + tid) * 8
                                        yb[l, j] = ring[o:o + 8]
                                    else:
                                        yb[l, j] = load_small(t0 + j * 8 + g, (c0 + w + i_ * WARPS) * 32 + q * 8, True)
                            if i_ + STAGES - 1 < mine:
                                issue(i_ + STAGES - 1, (i_ + STAGES - 1) % STAGES)
                            for s2 in range(2):
                                for i in range(MI):
                                    a = [[xa[l, i, 0, 4 * s2:4 * s2 + 2], xa[l, i, 1, 4 * s2:4 * s2 + 2],
                                          xa[l, i, 0, 4 * s2 + 2:4 * s2 + 4], xa[l, i, 1, 4 * s2 + 2:4 * s2 + 4]]
                                         for l in range(32)]
                                    for j in range(NI):
                                        b = [[yb[l, j, 4 * s2:4 * s2 + 2], yb[l, j, 4 * s2 + 2:4 * s2 + 4]] for l in range(32)]
                                        mma(acc[i][j], a, b)
                    else:
                        SS = 32 * (BM + BN)
                        ring = np.zeros(STAGES * SS)
                        mine = (c1 - c0 - w + WARPS - 1) // WARPS if c1 - c0 - w > 0 else 0
                        for i_ in range(mine):
                            c = c0 + w + i_ * WARPS
                            slot = i_ % STAGES
                            base = slot * SS
                            ring[base: base + SS] = np.nan
                            for p in range(32 * CPR):
                                kk, cc = p // CPR, p % CPR
                                k, n = c * 32 + kk, r0 + cc * 8
                                dst = base + kk * BM + ((cc ^ swz_key(kk, CPR)) << 3)
                                ring[dst:dst + 8] = Xf[k * N + n: k * N + n + 8] if (k < K and n < R) else 0
                            for l in range(32):
                                g, q = l >> 2, l & 3
                                for j in range(NI):
                                    o = base + 32 * BM + (j * 32 + l) * 8
                                    ring[o:o + 8] = load_small(t0 + j * 8 + g, c * 32 + q * 8, True)
                            yb = np.zeros((32, NI, 8))
                            for l in range(32):
                                for j in range(NI):
                                    o = base + 32 * BM + (j * 32 + l) * 8
                                    yb[l, j] = ring[o:o + 8]
                            for st in range(2):
                                for i2 in range(MI):
                                    rows = []
                                    for l in range(32):
                                        mq, rr = l >> 3, l & 7
                                        kk = 8 * (rr >> 1) + 4 * st + 2 * (mq >> 1) + (rr & 1)
                                        cc = 2 * i2 + (mq & 1)
                                        ad = base + kk * BM + ((cc ^ swz_key(kk, CPR)) << 3)
                                        rows.append(ring[ad:ad + 8])
                                    a = []
                                    for l in range(32):       # .trans: lane t gets [row 2(t%4)(+1)][col t/4]
                                        g, q = l >> 2, l & 3
                                        a.append([[rows[m * 8 + 2 * q][g], rows[m * 8 + 2 * q + 1][g]] for m in range(4)])
                                    for j in range(NI):
                                        b = [[yb[l, j, 4 * st:4 * st + 2], yb[l, j, 4 * st + 2:4 * st + 4]] for l in range(32)]
                                        mma(acc[i2][j], a, b)
                    for i in range(MI):
                        for j in range(NI):
                            for l in range(32):
                                g, q = l >> 2, l & 3
                                for e in range(4):
                                    r, t = i * 16 + g + (e >> 1) * 8, j * 8 + 2 * q + (e & 1)
                                    red[w, t * BM + r if bigb else r * BN + t] = acc[i][j][l][e]
                tile = by * gx + bx
                v = red.sum(axis=0)   # warp order (a numpy sum: the emulation checks indices, not rounding)
                for e in range(BM * BN):
                    r, t = (e % BM, e // BM) if bigb else (e // BN, e % BN)
                    if SPLIT_K > 1:
                        ws[z, tile, e] = v[e]
                    elif r0 + r < R and t0 + t < T:
                        if bigb:
                            C[t0 + t, r0 + r] = v[e]
                        else:
                            C[r0 + r, t0 + t] = v[e]
    if SPLIT_K > 1:
        for bx in range(gx):
            for by in range(gy):
                tile = by * gx + bx
                for e in range(BM * BN):
                    r0, t0 = bx * BM, by * BN
                    r, t = (e % BM, e // BM) if bigb else (e // BN, e % BN)
                    if r0 + r < R and t0 + t < T:
                        v = sum(ws[s, tile, e] for s in range(SPLIT_K))
                        if bigb:
                            C[t0 + t, r0 + r] = v
                        else:
                            C[r0 + r, t0 + t] = v
    return C
