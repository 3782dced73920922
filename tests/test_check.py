"""The checker catches planted faults, each in the check meant for it, and passes a correct kernel.

The kernels here are torch on the CPU: exact where the math is exact (fp32 products of fp16 inputs
rounded once to fp16), so a correct kernel's error is fp16 rounding alone (~2e-4 normwise).
"""
import torch

from cudal2.check import (CHECKS, GUARD, REL_TOL, check_kernel, edge_problems, reference, rel_error)
from cudal2.problems import Problem

SMALL_EDGES = (1, 17, 100)


def good(a, b, c, layout="nn"):
    c.copy_(reference(a, b, layout).to(torch.float16))


def make(layout):
    return lambda a, b, c: good(a, b, c, layout)


def run(fn, p, checks=CHECKS):
    return check_kernel(fn, p, "cpu", checks=checks, edge_sizes=SMALL_EDGES, stop_on_fail=False)


def failed(report):
    return {r.name for r in report.results if not r.passed}


def test_correct_kernel_passes_every_check_both_layouts():
    for layout in ("nn", "nt"):
        p = Problem(70, 33, 129, layout)
        rep = run(make(layout), p)
        assert rep.passed, [r.line() for r in rep.results]
        assert [r.name for r in rep.results] == list(CHECKS)
        rand = rep.results[0]
        # fp16 output rounding only: unit roundoff 2^-11 over sqrt(3) for uniform rounding
        assert 1e-5 < rand.value < 5e-4


def test_unwritten_rows_fail_poison():
    def partial(a, b, c):
        full = reference(a, b, "nn").to(torch.float16)
        c[:-1].copy_(full[:-1])              # last row never written
    rep = run(partial, Problem(64, 48, 32))
    assert "poison" in failed(rep)
    assert rep.results[2].name == "poison" and rep.results[2].value == 48


def test_write_past_c_fails_guard():
    def overrun(a, b, c):
        good(a, b, c)
        flat = torch.as_strided(c, (c.numel() + 3,), (1,), c.storage_offset())
        flat[-3:] = 0                          # three elements past the end of C
    rep = run(overrun, Problem(32, 32, 32), checks=("guard",))
    assert failed(rep) == {"guard"}
    assert "C guard" in rep.results[0].detail


def test_writing_an_input_fails_guard():
    def clobber(a, b, c):
        good(a, b, c)
        a[0, 0] += 1
    rep = run(clobber, Problem(32, 32, 32), checks=("guard",))
    assert "A input modified" in rep.results[0].detail


def test_non_finite_output_in_the_guard_check_is_counted_not_nan():
    # rel_error of an output holding NaN is NaN: the check reports how many, a finite value.
    def flaky(a, b, c):
        good(a, b, c)
        c[0, :5] = float("nan")
    rep = run(flaky, Problem(32, 40, 32), checks=("guard",))
    r = rep.results[0]
    assert not r.passed and r.value == 5.0 and "non-finite" in r.detail


def test_stale_results_fail_fresh():
    cache = {}

    def stale(a, b, c):
        if "c" not in cache:
            good(a, b, c)
            cache["c"] = c.clone()
        c.copy_(cache["c"])
    rep = run(stale, Problem(40, 24, 56), checks=("random", "fresh"))
    assert failed(rep) == {"fresh"}
    assert rep.results[1].value > 0.5           # a different product entirely


def test_small_error_fails_random_and_exact():
    def off(a, b, c):
        c.copy_((reference(a, b, "nn") * 1.01).to(torch.float16))
    rep = run(off, Problem(64, 64, 64))
    assert {"random", "exact"} <= failed(rep)
    assert 5e-3 < rep.results[0].value < 2e-2  # 1% off: twice the tolerance, caught


def test_exact_check_catches_an_error_below_the_random_tolerance():
    def one_ulp_high(a, b, c):   # ~1e-3 relative: passes the 5e-3 random bound, not exactness
        c.copy_((a.float() @ b.float()).mul(1 + 2**-10).to(torch.float16))
    rep = run(one_ulp_high, Problem(16, 16, 512), checks=("random", "exact"))
    assert failed(rep) == {"exact"}


def test_edge_fault_is_reported_at_its_shape():
    def breaks_on_small_m(a, b, c):
        if a.shape[0] == 17:
            c.zero_()
        else:
            good(a, b, c)
    rep = run(breaks_on_small_m, Problem(64, 64, 64), checks=("edges",))
    assert failed(rep) == {"edges"} and "17x" in rep.results[0].detail


def test_edges_respect_supports():
    p = Problem(64, 64, 64)
    seen = []

    def fn(a, b, c):
        seen.append(a.shape[0])
        good(a, b, c)
    rep = check_kernel(fn, p, "cpu", checks=("edges",), edge_sizes=SMALL_EDGES,
                       supports=lambda q: q.M % 8 == 0)
    assert rep.passed and 17 not in seen and 1 not in seen
    assert "not supported" in rep.results[0].detail


def test_raising_kernel_fails_with_reason():
    def boom(a, b, c):
        raise RuntimeError("launch failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    rep = check_kernel(boom, Problem(8, 8, 8), "cpu")
    assert not rep.passed and len(rep.results) == 1
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in rep.reason


def test_edge_problems_cover_each_axis():
    qs = edge_problems(Problem(4096, 4096, 4096, "nt"), (1, 3000))
    assert Problem(1, 256, 256, "nt") in qs and Problem(256, 256, 3000, "nt") in qs
    assert len(qs) == 6


def test_guard_is_alignment_preserving():
    assert (GUARD * 2) % 128 == 0


def test_rel_error_and_tolerance():
    ref = torch.ones(4, 4)
    assert rel_error(ref.half(), ref) == 0
    assert abs(rel_error((ref * 1.001).half(), ref) - 1e-3) < 1e-3
    assert REL_TOL == 5e-3
