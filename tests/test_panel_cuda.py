"""bench/panel_cuda.py on the CPU: k_panel compiles to 16-byte loads and stores without spills, and
the host's check (what each CTA must XOR and which words it must write) equals a line-by-line
emulation of the kernel's index math, on shapes off the tile grid (the numbers are the test's)."""
import ctypes
import re
from collections import Counter

import numpy as np
import pytest

from bench_import import load_bench


def _module():
    return load_bench("panel_cuda")


def _ops(source):
    from cudal2.backends.sass import cuobjdump, sass_lines
    from cudal2.nvrtc import compile_cubin
    pc = _module()
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit on PATH or the triton wheel's copy)")
    lines = sass_lines(compile_cubin(pc.stream_cuda.COMMON + pc.WRITE_TILE + source, "sm_90a", ("-std=c++17",))[0], tool)
    return Counter(re.sub(r"^@!?U?P\w+\s+", "", line).split()[0] for line in lines if not line.startswith("/*"))


def test_compiles_to_wide_loads_and_stores_without_spills():
    pc = _module()
    ops = _ops(pc.PANEL_KERNEL)
    assert ops["LDG.E.128.CONSTANT"] == 4 + 1          # U = 4 in flight, and the tail's
    assert ops["STG.E.128"] == 2                        # the fp16 tile, the fp32 partial
    assert ops["BAR.SYNC.DEFER_BLOCKING"] == 1          # block_xor's: loads landed before any store
    assert not any(op.startswith(("LDL", "STL")) for op in ops)


def test_the_bulk_kind_loads_by_bulk_copies_only():
    """k_panel_bulk: its operands come in by bulk copies completing on mbarriers (the prologue's and
    the refill's issue), never through registers; a barrier a slot; the same two stores; no spills."""
    pc = _module()
    ops = _ops(pc.BULK_KERNEL)
    assert ops["UBLKCP.S.G"] == 2 and ops["SYNCS.ARRIVE.TRANS64"] == 2      # issue(), inlined twice
    assert ops["SYNCS.PHASECHK.TRANS64.TRYWAIT"] >= 1
    assert not any(op.startswith("LDG") for op in ops)
    assert ops["STG.E.128"] == 2
    assert ops["BAR.SYNC.DEFER_BLOCKING"] == 3          # the barriers' init, a slot freed, block_xor's
    assert not any(op.startswith(("LDL", "STL")) for op in ops)


def _emulate(a_words, b_words, m, n, k, bm, bn, split):
    """k_panel's loops as written (per CTA: j over (ra + rb) * w words, A's first), in Python."""
    kw, tiles_n = k // 8, -(-n // bn)
    per = -(-kw // split)
    xors, written = [], []
    for blk in range(-(-m // bm) * tiles_n * split):
        s, t = blk % split, blk // split
        m0, n0 = (t // tiles_n) * bm, (t % tiles_n) * bn
        ra, rb = min(bm, m - m0), min(bn, n - n0)
        k0 = min(kw, s * per)
        w = min(kw, k0 + per) - k0
        x = 0
        for j in range((ra + rb) * w):
            words, r, c = (a_words, m0 + j // w, k0 + j % w) if j < ra * w else \
                (b_words, n0 + (j - ra * w) // w, k0 + (j - ra * w) % w)
            for v in words[r, 4 * c:4 * c + 4]:
                x ^= int(v)
        xors.append(x)
        if split == 1:
            cw = rb // 8
            written += [4 * (((m0 + j // cw) * n + n0) // 8 + j % cw) + e for j in range(ra * cw) for e in range(4)]
        else:
            q0 = blk * bm * bn // 4
            written += [4 * (q0 + j) + e for j in range(ra * rb // 4) for e in range(4)]
    return np.array(xors, dtype=np.uint32), sorted(written)


@pytest.mark.parametrize("m,n,k,bm,bn,split", [(40, 24, 64, 16, 16, 1), (40, 24, 64, 32, 16, 1),
                                               (33, 48, 200, 16, 32, 2), (17, 40, 136, 32, 16, 3)])
def test_the_host_check_is_the_kernels_index_math(m, n, k, bm, bn, split):
    pc = _module()
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2 ** 32, size=(m, k // 2), dtype=np.uint32)
    b = rng.integers(0, 2 ** 32, size=(n, k // 2), dtype=np.uint32)
    xors, written = _emulate(a, b, m, n, k, bm, bn, split)
    assert np.array_equal(pc.expected_xors(a, b, m, n, k, bm, bn, split), xors)
    assert sorted(pc.written_words(m, n, bm, bn, split).tolist()) == written
    if split == 1:
        assert written == list(range(m * n // 2))        # the tiles cover C, each word once


def _bulk_slots(ra, rb, rbytes, slot):
    """k_panel_bulk's issue() for every slot of one CTA as written: per slot (lo, hi) and its copies
    (offset in the slot, panel row, offset in the row's slice, bytes), lane by lane (lanes take rows
    lo // rbytes + lane, + 32, ...)."""
    total = (ra + rb) * rbytes
    out = []
    for i in range(-(-total // slot)):
        lo, hi = i * slot, min(total, (i + 1) * slot)
        copies = []
        for lane in range(32):
            r = lo // rbytes + lane
            while r * rbytes < hi:
                p0, p1 = max(lo, r * rbytes), min(hi, (r + 1) * rbytes)
                copies.append((p0 - lo, r, p0 - r * rbytes, p1 - p0))
                r += 32
        out.append((lo, hi, copies))
    return out


@pytest.mark.parametrize("m,n,k,bm,bn,split,slot", [(40, 24, 64, 16, 16, 1, 16384), (33, 48, 200, 16, 32, 2, 16384),
                                                    (17, 300, 4096, 32, 256, 1, 16384), (70, 40, 16384, 64, 16, 1, 16384),
                                                    (17, 40, 136, 32, 16, 3, 48), (5, 8, 1024, 16, 8, 2, 96)])
def test_the_bulk_kinds_slots_bring_in_exactly_its_panels(m, n, k, bm, bn, split, slot):
    """Per CTA, k_panel_bulk's copies fill each slot exactly (no gap, no overlap, none past it, each
    in one row, 16-byte aligned) and what lands XORs to k_panel's value, which the host check
    expects; and its ring depth fits MAX_STAGES slots. Small `slot`s put rows across slots."""
    pc = _module()
    rng = np.random.default_rng(11)
    a = rng.integers(0, 2 ** 32, size=(m, k // 2), dtype=np.uint32)
    b = rng.integers(0, 2 ** 32, size=(n, k // 2), dtype=np.uint32)
    want = pc.expected_xors(a, b, m, n, k, bm, bn, split)
    got = []
    for m0, ra, n0, rb, s in pc.ctas(m, n, bm, bn, split):
        k0, k1 = pc.slice_words(k, split, s)
        rbytes = (k1 - k0) * 16
        x = 0
        for lo, hi, copies in _bulk_slots(ra, rb, rbytes, slot):
            assert hi - lo <= slot
            filled = np.zeros(hi - lo, dtype=np.int32)
            buf = np.zeros((hi - lo) // 4, dtype=np.uint32)
            for dst, r, off, size in copies:
                assert dst % 16 == 0 and off % 16 == 0 and size % 16 == 0 and size > 0 and off + size <= rbytes
                filled[dst:dst + size] += 1
                words = a[m0 + r] if r < ra else b[n0 + r - ra]
                buf[dst // 4:(dst + size) // 4] = words[4 * k0 + off // 4:4 * k0 + (off + size) // 4]
            assert (filled == 1).all()
            x ^= int(np.bitwise_xor.reduce(buf)) if buf.size else 0
        got.append(x)
    assert np.array_equal(np.array(got, dtype=np.uint32), want)
    stages = pc.bulk_stages(m, n, k, bm, bn, split)
    widest = max((min(bm, m) + min(bn, n)) * (pc.slice_words(k, split, 0)[1] - pc.slice_words(k, split, 0)[0]) * 16, 1)
    assert 1 <= stages <= pc.MAX_STAGES and stages == min(pc.MAX_STAGES, -(-widest // pc.SLOT))


def test_a_shapes_cache_gives_every_config_its_own_expected_xors():
    """expected_xors with one cache across a shape's configs (the rows' XOR per slice layout kept):
    each config's value is the uncached one, and the cache holds one entry per operand and split."""
    pc = _module()
    rng = np.random.default_rng(5)
    m, n, k = 33, 48, 1032
    a = rng.integers(0, 2 ** 32, size=(m, k // 2), dtype=np.uint32)
    b = rng.integers(0, 2 ** 32, size=(n, k // 2), dtype=np.uint32)
    cache = {}
    cfgs = [c for c in pc.configs(m, n, k, 132) if c[0] == "bulk"]
    for _, bm, bn, split in cfgs:
        assert np.array_equal(pc.expected_xors(a, b, m, n, k, bm, bn, split, cache),
                              pc.expected_xors(a, b, m, n, k, bm, bn, split))
    assert set(cache) == {(op, s) for op in "ab" for s in {c[3] for c in cfgs}} and len(cfgs) > 2 * len(cache)


def test_configs_keep_the_16_byte_rule_slices_and_launch_size():
    pc = _module()
    assert "multiples of 8" in pc.config_error(64, 100, 64, 16, 16, 1, 132)
    assert "slice under 64" in pc.config_error(64, 64, 256, 16, 16, 8, 132)
    assert "over 16 an SM" in pc.config_error(4096, 4096, 64, 16, 16, 1, 132)
    assert "half of it covers" in pc.config_error(64, 4096, 1024, 128, 64, 1, 132)   # 64 covers M = 64
    assert pc.config_error(64, 4096, 1024, 64, 64, 1, 132) is None                   # one tile over M
    assert pc.config_error(100, 4096, 1024, 128, 64, 1, 132) is None                 # 64 would not cover 100
    got = pc.configs(512, 256, 512, 132)
    assert ("panel", 64, 64, 4) in got and ("panel", 64, 64, 16) not in got and all(s * 64 <= 512 or s == 1 for *_, s in got)
    assert ("bulk", 256, 256, 1) in got and ("panel", 256, 256, 1) not in got     # 256 tiles: the bulk kind's
    assert {kind for kind, *_ in got} == {"panel", "bulk"} and pc.configs(512, 256, 512, 132, kinds=("panel",)) == \
        [c for c in got if c[0] == "panel"]
    assert pc.pattern(np.arange(3, dtype=np.int64)).tolist() == [(w * 2654435761 & 0xFFFFFFFF) ^ 0x9E3779B9 for w in range(3)]


class _StandInDriver:
    """cuLaunchKernel for k_panel on CPU tensors: reads the argument slots as the kernel would and
    does what the kernel does (by _emulate), through the pointers; `spoil` flips one CTA's XOR."""

    TYPES = [ctypes.c_uint64] * 4 + [ctypes.c_uint32] * 7 + [ctypes.c_uint64]

    def __init__(self, spoil=False):
        self.spoil, self.launches, self.kinds = spoil, 0, Counter()

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, argp, extra):
        pc = _module()
        ptrs = ctypes.cast(argp, ctypes.POINTER(ctypes.c_void_p))
        a, b, c, ws, m, n, k, bm, bn, split, seed, out = [
            ctypes.cast(ptrs[i], ctypes.POINTER(t)).contents.value for i, t in enumerate(self.TYPES)]
        if func == "k_panel_bulk":      # one more slot, the ring depth, and its shared memory
            stages = ctypes.cast(ptrs[12], ctypes.POINTER(ctypes.c_uint32)).contents.value
            assert stages == pc.bulk_stages(m, n, k, bm, bn, split) and smem == stages * pc.SLOT
        else:
            assert func == "k_panel" and smem == 0
        self.kinds[func] += 1

        def words(addr, count):
            return np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(addr))
        xors, written = _emulate(words(a, m * k // 2).reshape(m, k // 2), words(b, n * k // 2).reshape(n, k // 2),
                                 m, n, k, bm, bn, split)
        assert gx == len(xors) and bx == 128
        if self.spoil:
            xors[len(xors) // 2] ^= 1
        words(out, gx)[:] = xors
        dst = words(c, m * n // 2) if split == 1 else words(ws, max(written) + 1)
        idx = np.array(written)
        dst[idx] = ((idx.astype(np.uint64) * 2654435761) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(seed)
        self.launches += 1
        return (0,)


def _stand_in_panels(monkeypatch, drv):
    import torch
    pc = _module()
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **{**kw, "device": "cpu"}))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("S", (), {"cuda_stream": 0})())
    p = object.__new__(pc.Panels)
    p.d, p.check, p.sms = drv, (lambda res, what: None), 132
    p.funcs = {"panel": "k_panel", "bulk": "k_panel_bulk"}
    return p


def test_every_tiled_config_is_checked_then_launched_on_its_buffers(monkeypatch):
    """chain_floor.panel_fns over a stand-in driver doing k_panel's work through the argument slots:
    every config of the shape is checked (each CTA's XOR, every word written) and comes back as a
    launch; a CTA's wrong XOR stops the run."""
    import torch
    cf = load_bench("chain_floor")
    pc = _module()
    m, n, k = 40, 24, 128
    inp = torch.randn(m * k + n * k, dtype=torch.float16)
    a, b = inp[: m * k].view(m, k), inp[m * k:].view(n, k)
    drv = _StandInDriver()
    fns, held = cf.panel_fns(_stand_in_panels(monkeypatch, drv), a, b, m, n, k)
    cfgs = pc.configs(m, n, k, 132)
    assert len(fns) == len(cfgs) and drv.launches == len(cfgs) and {1, 2} <= {s for *_, s in cfgs}
    assert drv.kinds == Counter({"k_panel": sum(c[0] == "panel" for c in cfgs), "k_panel_bulk": sum(c[0] == "bulk" for c in cfgs)})
    kind, bm, bn, split = cfgs[-1]
    fns[f"{kind} {bm}x{bn} /{split}"]()      # its buffers are `held`'s
    assert drv.launches == len(cfgs) + 1 and len(held) == 3 and kind == "bulk"
    del fns, held
    with pytest.raises(SystemExit, match="wrong XOR or unwritten words at 40x24x128"):
        cf.panel_fns(_stand_in_panels(monkeypatch, _StandInDriver(spoil=True)), a, b, m, n, k)
    assert cf.panel_fns(_stand_in_panels(monkeypatch, drv), a[:, :100], b[:, :100], m, n, 100) == ({}, ())  # K % 8
    # --panel-kinds panel: the 16-byte kind's configs only, each checked, none of the bulk kind's
    drv = _StandInDriver()
    fns, held = cf.panel_fns(_stand_in_panels(monkeypatch, drv), a, b, m, n, k, ["panel"])
    assert set(fns) == {f"{kd} {bm}x{bn} /{s}" for kd, bm, bn, s in cfgs if kd == "panel"}
    assert drv.kinds == Counter({"k_panel": len(fns)})


@pytest.mark.gpu
def test_every_tiled_config_passes_its_check_on_the_card():
    """k_panel on a card: every config of a few shapes (off the tile grid, a decode one) passes the
    check panel_fns makes before timing (it stops the run otherwise)."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from cudal2.device import current
    pc, cf = _module(), load_bench("chain_floor")
    panels = pc.Panels(current().sm_count)
    for m, n, k in ((40, 24, 128), (100, 520, 512), (7, 4096, 4096)):
        inp = torch.randn(m * k + n * k, device="cuda", dtype=torch.float16)
        fns, _held = cf.panel_fns(panels, inp[: m * k].view(m, k), inp[m * k:].view(n, k), m, n, k)
        assert len(fns) == len(pc.configs(m, n, k, panels.sms)) > 0


def test_the_screen_keeps_each_kinds_fastest():
    """chain_floor.screened: a 5-call screen (here on the host clock over functions that spin for a
    known time) keeps each kind's SCREEN_KEEP fastest; a kind with no more than that keeps all."""
    import time

    from conftest import HostClock
    cf = load_bench("chain_floor")

    def spin(us):
        def f():
            t = time.perf_counter() + us * 1e-6
            while time.perf_counter() < t:
                pass
        return f
    fns = {f"panel {i}": spin(100 + 60 * i) for i in range(6)}
    fns.update({f"bulk {i}": spin(400 - 60 * i) for i in range(6)})
    got = cf.screened(fns, keep=2, clock=HostClock())
    assert sorted(got) == ["bulk 4", "bulk 5", "panel 0", "panel 1"]
    few = {"panel 0": fns["panel 0"], "bulk 0": fns["bulk 0"]}
    assert cf.screened(few, keep=2, clock=HostClock()) == ["panel 0", "bulk 0"]
