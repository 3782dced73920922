"""A numpy emulation of kernels_cuda/stream.cu's index math (no GPU): the stream-K split of the
(tile, 32-k chunk) list over the CTAs, the warps' rows, the per-lane loads, the k permutation shared
by both operands, the ldmatrix.trans row addresses and swizzle, the mma.sync m16n8k16 fragment
layouts (PTX ISA), the segments, workspace slots, (tile, warp) counters, the fixed-order reduction
and the masked stores. It follows the kernel statement by statement so a wrong index shows up as a
wrong product on the CPU. CTAs run in a caller-given order (the last to arrive reduces)."""
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


def swz_y(kk, ni):
    if ni == 8:
        return (((kk >> 3) & 3) << 1) | (kk & 1)
    if ni == 4:
        return (kk >> 3) & 3
    if ni == 2:
        return (kk >> 3) & 1
    return 0


def swz_key(kk, cpr):
    if cpr >= 8:
        return (((kk >> 3) & 3) << 1) | (kk & 1)
    if cpr == 4:
        return (kk >> 3) & 3
    return (kk >> 3) & 1


GARBAGE = np.nan     # what a piece the kernel skips (token >= T, row >= R) holds: must reach no output


def grid_size(M, N, K, BM, BN, SPLIT_K, slots):
    """cudal2.backends.cuda_stream.plan's G."""
    R, T = (N, M) if M <= N else (M, N)
    tiles = -(-R // BM) * -(-T // BN)
    return max(1, min(slots, tiles * SPLIT_K, tiles * -(-K // 32)))


def run(A, B, layout, BM, BN, WARPS, STAGES, SPLIT_K, slots=7, order=None):
    """C = A @ B (B [K,N] for nn, [N,K] for nt) the way the kernel computes it; `slots` stands for
    the resident CTAs of the device, `order` the order the CTAs finish in (default: reversed)."""
    M, K = A.shape
    N = B.shape[1] if layout == "nn" else B.shape[0]
    bigb = M <= N
    nt = layout == "nt"
    R, T = (N, M) if bigb else (M, N)
    Xf = B.reshape(-1) if bigb else A.reshape(-1)
    Yf = A.reshape(-1) if bigb else B.reshape(-1)
    x_kcontig = not (bigb and not nt)
    y_vec = bigb or nt
    ytile = not y_vec and N % 8 == 0      # nn, A large: B's [32 k][BN] tile through smem + ldmatrix.trans
    BMW = BM // WARPS
    MI, NI, CPR = BMW // 16, BN // 8, BMW // 8
    nch = (K + 31) >> 5
    TY = -(-T // BN)
    W = -(-R // BM) * TY * nch
    G = grid_size(M, N, K, BM, BN, SPLIT_K, slots)
    base, rem = W // G, W % G
    start = lambda p: p * base + min(p, rem)

    def cta_of(L):
        big = rem * (base + 1)
        return L // (base + 1) if L < big else rem + (L - big) // base

    for p in range(G):                   # the closed form agrees with the definition
        assert start(p) <= start(p + 1) - 1 and cta_of(start(p)) == p and cta_of(start(p + 1) - 1) == p
    C = np.full((M, N), np.nan)
    ws = np.full((G * 2 * WARPS * BMW * BN,), np.nan)
    cnt = np.zeros(-(-R // BM) * TY * WARPS, dtype=np.int64)

    def cur_at(L):
        tile = L // nch
        return [tile, L - tile * nch, tile // TY, tile % TY]

    def cur_next(s):
        s[1] += 1
        if s[1] == nch:
            s[1] = 0
            s[0] += 1
            s[3] += 1
            if s[3] == TY:
                s[3] = 0
                s[2] += 1

    def load_small_strided(t, k0):
        if t >= T or k0 >= K:
            return np.zeros(8)
        return np.array([Yf[(k0 + e) * N + t] for e in range(8)])

    def chunk(w, cu, acc):
        """One 32-k chunk of warp w at cursor cu: the loads and MMAs of the kernel's loop body."""
        c, xi, yi = cu[1], cu[2], cu[3]
        rb, k_base = xi * BM + w * BMW, c * 32
        if x_kcontig:
            xa = np.full((32, MI, 2, 8), GARBAGE); yb = np.full((32, NI, 8), GARBAGE)
            ybf = None
            if ytile:
                # The warp's tile: lane l's token piece m holds position pos = m * 32 + l.
                tilemem = np.full((NI * 32, 8), GARBAGE)
                for m in range(NI):
                    for l in range(32):
                        pos = m * 32 + l
                        kk = pos // NI
                        cc = (pos % NI) ^ swz_y(kk, NI)
                        ky, t = k_base + kk, yi * BN + cc * 8
                        tilemem[pos] = Yf[ky * N + t: ky * N + t + 8] if (ky < K and t < T) else 0
                # ldmatrix.x4.trans per (step, token block pair): yb fragments b0, b1 per (l, j, step).
                ybf = np.zeros((32, NI, 2, 2, 2))     # [lane][j][step][b0/b1][2 halves]
                for s2 in range(2):
                    for j in range(0, NI, 2):
                        rows = []
                        for l in range(32):
                            mq, rr = l >> 3, l & 7
                            kk = 8 * (rr >> 1) + 4 * s2 + 2 * (mq & 1) + (rr & 1)
                            cc = j + (mq >> 1)
                            rows.append(tilemem[kk * NI + (cc ^ swz_y(kk, NI))])
                        for l in range(32):
                            g, q = l >> 2, l & 3
                            regs = [[rows[m * 8 + 2 * q][g], rows[m * 8 + 2 * q + 1][g]] for m in range(4)]
                            ybf[l, j, s2, 0], ybf[l, j, s2, 1] = regs[0], regs[1]
                            ybf[l, j + 1, s2, 0], ybf[l, j + 1, s2, 1] = regs[2], regs[3]
            for l in range(32):
                g, q = l >> 2, l & 3
                k = k_base + q * 8
                for i2 in range(MI):
                    for h in range(2):
                        r = rb + i2 * 16 + g + h * 8
                        if r < R:
                            xa[l, i2, h] = Xf[r * K + k: r * K + k + 8] if k < K else 0
                for j in range(NI):
                    t = yi * BN + j * 8 + g
                    if y_vec:
                        if t < T:
                            yb[l, j] = Yf[t * K + k: t * K + k + 8] if k < K else 0
                    elif not ytile:
                        yb[l, j] = load_small_strided(t, k)
            for s2 in range(2):
                for i2 in range(MI):
                    a = [[xa[l, i2, 0, 4 * s2:4 * s2 + 2], xa[l, i2, 1, 4 * s2:4 * s2 + 2],
                          xa[l, i2, 0, 4 * s2 + 2:4 * s2 + 4], xa[l, i2, 1, 4 * s2 + 2:4 * s2 + 4]] for l in range(32)]
                    for j in range(NI):
                        if ytile:
                            b = [[ybf[l, j, s2, 0], ybf[l, j, s2, 1]] for l in range(32)]
                        else:
                            b = [[yb[l, j, 4 * s2:4 * s2 + 2], yb[l, j, 4 * s2 + 2:4 * s2 + 4]] for l in range(32)]
                        mma(acc[i2][j], a, b)
        else:
            SS = 32 * (BMW + BN)
            ring = np.full(SS, np.nan)
            for l in range(32):
                g, q = l >> 2, l & 3
                ky = k_base + q * 8
                for j in range(NI):
                    t = yi * BN + j * 8 + g
                    o = 32 * BMW + (j * 32 + l) * 8
                    ring[o:o + 8] = Yf[t * K + ky: t * K + ky + 8] if (ky < K and t < T) else 0
            for p0 in range(0, 32 * CPR, 32):
                for l in range(32):
                    pc = p0 + l
                    kk, cc = pc // CPR, pc % CPR
                    k, n = k_base + kk, rb + cc * 8
                    dst = kk * BMW + ((cc ^ swz_key(kk, CPR)) << 3)
                    ring[dst:dst + 8] = Xf[k * N + n: k * N + n + 8] if (k < K and n < R) else 0
            yb = np.zeros((32, NI, 8))
            for l in range(32):
                for j in range(NI):
                    o = 32 * BMW + (j * 32 + l) * 8
                    yb[l, j] = ring[o:o + 8]
            for s2 in range(2):
                for i2 in range(MI):
                    rows = []
                    for l in range(32):
                        mq, rr = l >> 3, l & 7
                        kk = 8 * (rr >> 1) + 4 * s2 + 2 * (mq >> 1) + (rr & 1)
                        cc = 2 * i2 + (mq & 1)
                        ad = kk * BMW + ((cc ^ swz_key(kk, CPR)) << 3)
                        rows.append(ring[ad:ad + 8])
                    a = []
                    for l in range(32):       # .trans: lane t gets [row 2(t%4)(+1)][col t/4]
                        g, q = l >> 2, l & 3
                        a.append([[rows[m * 8 + 2 * q][g], rows[m * 8 + 2 * q + 1][g]] for m in range(4)])
                    for j in range(NI):
                        b = [[yb[l, j, 4 * s2:4 * s2 + 2], yb[l, j, 4 * s2 + 2:4 * s2 + 4]] for l in range(32)]
                        mma(acc[i2][j], a, b)

    def coords(rb, tb, i, j, e, l):
        g, q = l >> 2, l & 3
        return rb + i * 16 + g + (e >> 1) * 8, tb + j * 8 + 2 * q + (e & 1)

    def store(rb, tb, i, j, e, l, v):
        r, t = coords(rb, tb, i, j, e, l)
        if r < R and t < T:
            if bigb:
                C[t, r] = v
            else:
                C[r, t] = v

    def flush(p, w, cu, cs, slot, acc):
        tile, c, xi, yi = cu
        rb, tb = xi * BM + w * BMW, yi * BN
        if cs == 0 and c == nch - 1:
            for i in range(MI):
                for j in range(NI):
                    for e in range(4):
                        for l in range(32):
                            store(rb, tb, i, j, e, l, acc[i][j][l][e])
            return
        mine = ((p * 2 + slot) * WARPS + w) * (BMW * BN)
        for i in range(MI):
            for j in range(NI):
                for e in range(4):
                    for l in range(32):
                        r, t = coords(rb, tb, i, j, e, l)
                        if r < R and t < T:
                            ws[mine + ((i * NI + j) * 4 + e) * 32 + l] = acc[i][j][l][e]
        ts = tile * nch
        pf, pl = cta_of(ts), cta_of(ts + nch - 1)
        old = cnt[tile * WARPS + w]
        cnt[tile * WARPS + w] += 1
        if old == pl - pf:
            tot = [[[[0.0] * 4 for _ in range(32)] for _ in range(NI)] for _ in range(MI)]
            for pp in range(pf, pl + 1):
                sl = 1 if start(pp) < ts else 0
                src = ((pp * 2 + sl) * WARPS + w) * (BMW * BN)
                for i in range(MI):
                    for j in range(NI):
                        for e in range(4):
                            for l in range(32):
                                r, t = coords(rb, tb, i, j, e, l)
                                if r < R and t < T:
                                    v = ws[src + ((i * NI + j) * 4 + e) * 32 + l]
                                    assert not np.isnan(v), "reduced a partial nobody wrote"
                                    tot[i][j][l][e] += v
            for i in range(MI):
                for j in range(NI):
                    for e in range(4):
                        for l in range(32):
                            store(rb, tb, i, j, e, l, tot[i][j][l][e])
            cnt[tile * WARPS + w] = 0

    for p in (order if order is not None else range(G - 1, -1, -1)):
        l0, total = start(p), base + (1 if p < rem else 0)
        assert total >= 1
        for w in range(WARPS):
            acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(NI)] for _ in range(MI)]
            cs = cur_at(l0)
            seg_c, slot = cs[1], 0
            for i in range(total):
                chunk(w, cs, acc)
                if cs[1] == nch - 1 or i == total - 1:
                    flush(p, w, list(cs), seg_c, slot, acc)
                    acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(NI)] for _ in range(MI)]
                    slot, seg_c = 1, 0
                cur_next(cs)
    assert not cnt.any(), "a counter was left non-zero"
    return C
