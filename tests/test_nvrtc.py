"""cudal2.nvrtc, the NVRTC wrapper under the CUDA backend and the cluster probe (no GPU needed)."""
import pytest

from cudal2.nvrtc import NvrtcError, compile_cubin


def test_an_empty_log_leaves_the_process_bytes_alone():
    # NVRTC writes its log into the buffer it is given; an empty log (no --ptxas-options=-v) has
    # size 1, and a one-byte bytes object is shared by the whole process. It must stay b" ".
    pytest.importorskip("cuda.bindings.nvrtc")
    before = b" " * 1
    cubin, log = compile_cubin('extern "C" __global__ void k() {}', "sm_90a", ("-std=c++17",))
    assert log == ""
    assert b" " * 1 == before == bytes([32]) and b" ".isspace()
    assert cubin[:4] == b"\x7fELF" and b"k\x00" in cubin


def test_a_refused_source_raises_with_its_log():
    pytest.importorskip("cuda.bindings.nvrtc")
    with pytest.raises(NvrtcError) as e:
        compile_cubin('extern "C" __global__ void k() { undeclared(); }', "sm_90a", ("-std=c++17",))
    assert "NVRTC failed" in e.value.message and "undeclared" in e.value.log
