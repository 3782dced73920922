"""Masked field-by-field sampling never yields a spec that `validate` rejects (property test)."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.rl.policy import SpecPolicy, UniformPolicy
from cudal2.spec import FAMILIES, validate

POLICY = SpecPolicy(seed=1)
# Sizes on and off the tile grid: 1, primes, odd, not multiples of 8 (TMA families must be masked).
sizes = st.one_of(st.integers(1, 20000), st.sampled_from([1, 7, 17, 100, 1000, 3000, 4097, 16384]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=sizes, N=sizes, K=sizes, layout=st.sampled_from(["nn", "nt"]), seed=st.integers(0, 2**31 - 1),
       backends=st.sampled_from([None, ("triton",), ("cuda",)]), arch=st.sampled_from(["sm_90a", "sm_80"]),
       uniform=st.booleans())
def test_masked_samples_always_validate(M, N, K, layout, seed, backends, arch, uniform):
    problem, device = Problem(M, N, K, layout), DeviceInfo.target(arch)
    pol = UniformPolicy() if uniform else POLICY
    samples = pol.sample(problem, device, 16, generator=torch.Generator().manual_seed(seed), backends=backends)
    for s in samples:
        validate(s.spec, problem, device)          # raises SpecError naming the field if not
        if backends:
            assert s.spec.backend in backends
        assert s.spec.family in FAMILIES[s.spec.backend]


def test_tma_families_masked_for_unaligned_shapes(hopper):
    # N % 8 != 0: persistent and wgmma use TMA and must never be proposed.
    samples = UniformPolicy().sample(Problem(256, 100, 256), hopper, 200, generator=torch.Generator().manual_seed(0))
    fams = {s.spec.family for s in samples}
    # stream: a small-class shape (< 1 GFLOP) with A the large operand, which needs no N % 8
    assert fams == {"tiled", "mma", "stream"}, fams
    # Aligned: all five families appear in 200 uniform samples (each has prob >= 1/3 per backend).
    samples = UniformPolicy().sample(Problem(256, 128, 256), hopper, 200, generator=torch.Generator().manual_seed(0))
    assert {s.spec.family for s in samples} == {"tiled", "persistent", "mma", "wgmma", "stream"}
    # Past the small class and past 64 tokens no stream spec is proposed.
    samples = UniformPolicy().sample(Problem(4096, 128, 4096), hopper, 200, generator=torch.Generator().manual_seed(0))
    assert "stream" not in {s.spec.family for s in samples}


def test_backend_restriction_cuda_only(hopper):
    samples = POLICY.sample(Problem(64, 64, 64), hopper, 64, generator=torch.Generator().manual_seed(0),
                            backends=("cuda",))
    assert {s.spec.backend for s in samples} == {"cuda"}
    with pytest.raises(ValueError, match="no valid spec of backend"):
        POLICY.sample(Problem(64, 64, 64), hopper, 1, backends=("metal",))
