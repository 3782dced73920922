"""bench/launch_cost.py on the CPU: its probe kernels compile for sm_90a (NVRTC, no GPU) to the
instructions each case is about, the host reference of the load kernels' XOR, and the table's
arithmetic. The card run is bench's."""
import array
import random

import pytest

from bench_import import load_bench

lc = load_bench("launch_cost")


def test_every_case_names_a_kernel_of_the_source():
    for name, (fn, grid, threads, smem, kind) in lc.CASES.items():
        assert f'extern "C" __global__' in lc.SOURCE and f" {fn}(" in lc.SOURCE, name
        assert kind in ("none", "ptrs", "tmaps", "tma", "tile") and grid >= 1 and threads % 32 == 0
        assert smem <= 227 * 1024          # the H100 / H200 per-block limit: every case launches
    assert lc.BASE in lc.CASES


def test_probe_compiles_to_the_instructions_it_compares():
    from cudal2.backends.sass import cuobjdump, sass_lines
    cubin = lc.compile_probe()
    for fn in {c[0] for c in lc.CASES.values()}:
        assert fn.encode() in cubin
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump on PATH or in the triton wheel")
    sass = "\n".join(sass_lines(cubin, tool))
    # one TMA load per TMA kernel, the prefetch only in k_tma_pf, cp.async's LDGSTS, 16-byte LDG
    assert sass.count("UTMALDG.2D") == 2 and sass.count("UTMACCTL.PF") == 1
    assert sass.count("LDGSTS.E.BYPASS.128") == 4 and "LDG.E.128" in sass


def test_xor_reference():
    rng = random.Random(0)
    words = [rng.getrandbits(32) for _ in range(2048)]
    want = 0
    for w in words:
        want ^= w
    assert lc.xor_words(array.array("I", words).tobytes()) == want
    assert lc.xor_words(bytes(8)) == 0


def test_deltas_and_table():
    rows = lc.deltas([{"case": lc.BASE, "offline_us": 3.40, "server_us": 5.0},
                      {"case": "load: TMA", "offline_us": 4.05, "server_us": 6.1}])
    assert rows[0]["offline_minus_empty_us"] == 0 and rows[1]["offline_minus_empty_us"] == pytest.approx(0.65)
    assert rows[1]["server_minus_empty_us"] == pytest.approx(1.1)
    md = lc.markdown(rows, "NVIDIA H200", "abc1234", "python3 bench/launch_cost.py --out x")
    assert "| load: TMA | 4.050 | +0.650 | 6.100 | +1.100 |" in md


def test_cli_refuses_bad_arguments_and_needs_a_gpu(tmp_path, capsys):
    with pytest.raises(SystemExit):
        lc.main(["--out", str(tmp_path), "--min-ms", "0"])
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the no-GPU path is not taken")
    assert lc.main(["--out", str(tmp_path)]) == 3
    assert "no CUDA GPU" in capsys.readouterr().err and not list(tmp_path.iterdir())


@pytest.mark.gpu
def test_probe_runs_every_case_on_the_card(gpu_device):
    """Every case launches on the card, and the load kernels return the tile's XOR."""
    import torch
    probe = lc.Probe(lc.compile_probe())
    assert all(probe.check_loads().values())
    for name in lc.CASES:
        probe.launch_checked(name)
    torch.cuda.synchronize()
