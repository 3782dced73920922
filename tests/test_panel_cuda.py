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


def test_compiles_to_wide_loads_and_stores_without_spills():
    from cudal2.backends.sass import cuobjdump, sass_lines
    from cudal2.nvrtc import compile_cubin
    pc = _module()
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit on PATH or the triton wheel's copy)")
    ops = Counter(re.sub(r"^@!?U?P\w+\s+", "", line).split()[0]
                  for line in sass_lines(compile_cubin(pc.SOURCE, "sm_90a", ("-std=c++17",))[0], tool)
                  if not line.startswith("/*"))
    assert ops["LDG.E.128.CONSTANT"] == 4 + 1          # U = 4 in flight, and the tail's
    assert ops["STG.E.128"] == 2                        # the fp16 tile, the fp32 partial
    assert ops["BAR.SYNC.DEFER_BLOCKING"] == 1          # block_xor's: loads landed before any store
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


def test_configs_keep_the_16_byte_rule_slices_and_launch_size():
    pc = _module()
    assert "multiples of 8" in pc.config_error(64, 100, 64, 16, 16, 1, 132)
    assert "slice under 64" in pc.config_error(64, 64, 256, 16, 16, 8, 132)
    assert "over 16 an SM" in pc.config_error(4096, 4096, 64, 16, 16, 1, 132)
    got = pc.configs(512, 256, 512, 132)
    assert (64, 64, 4) in got and (64, 64, 16) not in got and all(s * 64 <= 512 or s == 1 for _, _, s in got)
    assert pc.pattern(np.arange(3, dtype=np.int64)).tolist() == [(w * 2654435761 & 0xFFFFFFFF) ^ 0x9E3779B9 for w in range(3)]


class _StandInDriver:
    """cuLaunchKernel for k_panel on CPU tensors: reads the argument slots as the kernel would and
    does what the kernel does (by _emulate), through the pointers; `spoil` flips one CTA's XOR."""

    TYPES = [ctypes.c_uint64] * 4 + [ctypes.c_uint32] * 7 + [ctypes.c_uint64]

    def __init__(self, spoil=False):
        self.spoil, self.launches = spoil, 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, argp, extra):
        ptrs = ctypes.cast(argp, ctypes.POINTER(ctypes.c_void_p))
        a, b, c, ws, m, n, k, bm, bn, split, seed, out = [
            ctypes.cast(ptrs[i], ctypes.POINTER(t)).contents.value for i, t in enumerate(self.TYPES)]

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
    p.d, p.check, p.sms, p.func = drv, (lambda res, what: None), 132, "k_panel"
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
    assert len(fns) == len(cfgs) and drv.launches == len(cfgs) and {1, 2} <= {s for _, _, s in cfgs}
    fns[f"panel {cfgs[0][0]}x{cfgs[0][1]} /{cfgs[0][2]}"]()      # its buffers are `held`'s
    assert drv.launches == len(cfgs) + 1 and len(held) == 3
    del fns, held
    with pytest.raises(SystemExit, match="wrong XOR or unwritten words at 40x24x128"):
        cf.panel_fns(_stand_in_panels(monkeypatch, _StandInDriver(spoil=True)), a, b, m, n, k)
    assert cf.panel_fns(_stand_in_panels(monkeypatch, drv), a[:, :100], b[:, :100], m, n, 100) == ({}, ())  # K % 8


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
