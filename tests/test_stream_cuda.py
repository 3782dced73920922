"""bench/stream_cuda.py: the CUDA read and write kernels compile for sm_90a without a GPU to the
load and store paths they are named for, refuse buffers they cannot take, and (on a card) the
readers XOR every word exactly once and the writers write every word's pattern."""
import re
from collections import Counter

import numpy as np
import pytest

from bench_import import load_bench


def _module():
    return load_bench("stream_cuda")


def test_compiles_to_bulk_copies_and_wide_loads_without_spills():
    from cudal2.backends.sass import cuobjdump, sass_lines
    sc = _module()
    cubin = sc.compile_streams("sm_90a")
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit on PATH or the triton wheel's copy)")
    ops = Counter(re.sub(r"^@!?U?P\w+\s+", "", line).split()[0] for line in sass_lines(cubin, tool)
                  if not line.startswith("/*"))
    assert ops["UBLKCP.S.G"] >= 1                     # k_bulk: TMA's 1D bulk copy, global -> shared
    assert ops["SYNCS.PHASECHK.TRANS64.TRYWAIT"] >= 1  # ... completed on an mbarrier
    assert ops["LDS.128"] >= 1                         # ... and read back out of shared memory
    # k_ldg4 / k_ldg8: 4 + 8 unrolled 16-byte loads through the read-only path, plus each one's tail;
    # k_chain4 / k_chain8 the same again (their reads are ldg's)
    assert ops["LDG.E.128.CONSTANT"] == 2 * (4 + 1 + 8 + 1)
    assert ops["UBLKCP.G.S"] >= 1                     # k_bulk_store4: TMA's 1D bulk store, shared -> global
    assert ops["FENCE.VIEW.ASYNC.S"] >= 1              # ... after the slot's writes are fenced for it
    # k_stg4: 4 unrolled 16-byte stores and the tail's; each chain kernel's writes are stg<4>'s
    assert ops["STG.E.128"] == 3 * (4 + 1)
    assert not any(op.startswith(("LDL", "STL")) for op in ops)   # no local memory (spills)


def test_register_counts_let_the_configured_ctas_share_an_sm():
    # ldg / stg run 2048 threads an SM (4 x 512, 8 x 256): 65536 registers / 2048 = 32 a thread at
    # most, or the grid's CTAs are not all resident at once. (A CPU host has no driver, so NVRTC's
    # -v log always names the entries: NOTES 2026-12-05, run 70.)
    from cudal2.nvrtc import compile_cubin
    sc = _module()
    _, log = compile_cubin(sc.SOURCE, "sm_90a", ("-std=c++17", "-Xptxas=-v"))
    regs = dict(re.findall(r"Function properties for (\w+)\n.*?Used (\d+) registers", log, re.S))
    if not regs:     # with a driver, a PTX it has compiled before comes from its cache, ptxas silent
        pytest.skip("NVRTC's log names no entry (the driver's compute cache answered)")
    for name, (kernel, threads, per_sm, _c, _s) in {**sc.READERS, **sc.WRITERS, **sc.CHAINS}.items():
        # a chain's "fit" grid (per_sm 0) puts up to 4 of its CTAs on an SM
        assert int(regs[kernel]) * threads * (per_sm or 4) <= 65536, (name, regs[kernel])


def test_config_limits_and_smem():
    sc = _module()
    mib = 1 << 20
    for name in {**sc.READERS, **sc.WRITERS}:
        assert sc.config_error(name, 8 * mib) is None, name
        assert sc.smem_bytes(name) <= 227 * 1024          # one CTA's shared memory on sm_90
        assert {**sc.READERS, **sc.WRITERS}[name][2] * sc.smem_bytes(name) <= 228 * 1024   # the CTAs an SM holds
    # one attribute per kernel: the largest ring of its configs (k_bulk's 32K x6 after its 8K x8)
    assert sc.kernel_smem()["k_bulk"] == 6 * 32 * 1024 and sc.kernel_smem()["k_ldg4"] == 0
    assert "multiple of the 16384 B chunk" in sc.config_error("bulk 16K x8", 8 * mib + 4096)
    assert "multiple of 16" in sc.config_error("ldg x4 t512", 8 * mib + 4)
    assert sc.config_error("ldg x4 t512", 8 * mib + 16) is None      # grid-stride: any 16-byte multiple
    assert "multiple of the 32768 B chunk" in sc.config_error("bulk 32K x4", 8 * mib + 16384)
    with pytest.raises(KeyError, match="no reader, writer or chain"):
        sc.config_error("bulk 1K x1", 8 * mib)


def test_xor_all_is_the_xor_of_the_words():
    sc = _module()
    words = np.array([1, 2, 4, 0xFFFFFFFF, 7], dtype="<u4")
    assert sc.xor_all(words.tobytes()) == (1 ^ 2 ^ 4 ^ 0xFFFFFFFF ^ 7)
    assert sc.xor_all(b"") == 0
    assert sc.xor_all(words.view(np.int32)) == sc.xor_all(words.tobytes())   # an array as it is


# 3 MiB: fewer chunks than CTAs for the 32 KiB ring (some CTAs read or write none); 3 MiB + 48 KiB
# for the 16-byte loops' tails (not a multiple of any grid's stride; the 32 KiB configs refuse it)
SIZES = (3 << 20, (3 << 20) + (48 << 10))


def test_chain_grids_fit_the_bytes_or_the_sms():
    """A chain's "fit" config launches as many CTAs as one U-load step per thread needs (at least 1,
    at most 4 an SM); the others a fixed number an SM."""
    sc = _module()
    s = object.__new__(sc.Streams)
    s.sms = 132
    assert s.grid("chain x4 t128 fit", 1) == 1
    assert s.grid("chain x4 t128 fit", 128 * 4) == 1 and s.grid("chain x4 t128 fit", 128 * 4 + 1) == 2
    assert s.grid("chain x4 t128 fit", 10 ** 9) == 4 * 132
    assert s.grid("chain x4 t256 2/SM", 1) == 264 and s.grid("chain x4 t512 4/SM", 10 ** 9) == 528
    with pytest.raises(KeyError, match="no reader, writer or chain"):
        s.grid("chain x3", 1)


@pytest.fixture
def streams():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from cudal2.device import current
    sc = _module()
    return sc, sc.Streams(sc.compile_streams(), current().sm_count)


@pytest.mark.gpu
def test_every_reader_reads_every_word_once(streams):
    import torch
    sc, readers = streams
    out = torch.empty(max(readers.grid(c) for c in sc.READERS), device="cuda", dtype=torch.int32)
    for nbytes in SIZES:
        buf = torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), device="cuda", dtype=torch.int32)
        want = sc.xor_all(buf.cpu().numpy())
        names = [n for n in sc.READERS if not sc.config_error(n, nbytes)]
        for name in names:
            assert readers.check_read(name, buf, out, want), (name, nbytes)
        buf[12345] ^= 1                                # a word changed: every reader sees it
        for name in names:
            assert not readers.check_read(name, buf, out, want), name


@pytest.mark.gpu
def test_every_writer_writes_every_words_pattern(streams):
    import torch
    sc, writers = streams
    for nbytes in SIZES:
        buf = torch.empty(nbytes // 2, device="cuda", dtype=torch.float16)
        for name in (n for n in sc.WRITERS if not sc.config_error(n, nbytes)):
            assert writers.check_write(name, buf), (name, nbytes)
            buf.view(torch.int32)[-1] ^= 1            # the last word (the tail's) wrong: seen
            assert not sc.holds_pattern(buf), name


@pytest.mark.gpu
def test_every_chain_reads_every_word_then_writes_every_words_pattern(streams):
    """Each chain config over inputs and outputs of a tiny, an odd and a decode-sized GEMM: its CTAs
    XOR to the input's words and every output word holds its pattern; one input word changed, or
    the output's last word spoiled after the call, is seen."""
    import torch
    sc, chains = streams
    out = torch.empty(4 * chains.sms, device="cuda", dtype=torch.int32)
    for n_in, n_out in ((8 * 1024, 4 * 1024), (1000 * 17 * 8, 33 * 8), (4096 * 4096 + 16 * 4096, 16 * 4096)):
        inp = torch.randn(n_in, device="cuda", dtype=torch.float16)
        c = torch.empty(n_out, device="cuda", dtype=torch.float16)
        want = sc.xor_all(inp.cpu().numpy().tobytes())
        for name in sc.CHAINS:
            assert chains.check_chain(name, inp, c, out, want), (name, n_in)
            c.view(torch.int32)[-1] ^= 1
            assert not sc.holds_pattern(c), name
        inp.view(torch.int16)[777] ^= 1
        for name in sc.CHAINS:
            assert not chains.check_chain(name, inp, c, out, want), name
