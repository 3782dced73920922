"""KernelSpec text form, the validity rules and the masking they drive."""
import random

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import CHOICES, FIELDS, KernelSpec, SpecError, default_spec, is_valid, validate, violations
from cudal2.spec_mask import enumerate_valid, valid_values

H = DeviceInfo.target("sm_90a")


def test_text_round_trip_every_family():
    p = Problem(4096, 4096, 4096)
    for fam in ("tiled", "persistent", "mma", "wgmma"):
        s = default_spec(fam, p, H)
        assert KernelSpec.parse(s.text) == s
        assert s.text.split()[0] == f"backend={s.backend}"
        assert [t.split("=")[0] for t in s.tokens()] == list(FIELDS)


def test_parse_fills_family_pins_and_backend():
    s = KernelSpec.parse("family=wgmma bm=128 bn=256 warps=12 stages=4")
    assert (s.backend, s.warp_spec, s.split_k, s.bk) == ("cuda", 1, 1, 64)
    assert KernelSpec.parse(s.text) == s


@pytest.mark.parametrize("text,field", [
    ("bm=7", "bm"), ("bogus=1", "bogus"), ("bm=x", "bm"), ("bm=64 bm=64", "bm"),
    ("bm64", "spec"), ("", "spec"), ("backend=rocm", "backend"),
])
def test_parse_errors_name_the_field(text, field):
    with pytest.raises(SpecError) as e:
        KernelSpec.parse(text)
    assert e.value.field == field
    assert str(e.value).startswith(field + ":")


@pytest.mark.parametrize("text,problem,field,needle", [
    ("backend=triton family=mma", Problem(64, 64, 64), "family", "not a triton family"),
    ("family=persistent", Problem(64, 17, 64), "family", "N % 8"),
    ("family=wgmma bm=32 warps=8", Problem(256, 256, 256), "bm", "wgmma takes bm"),
    ("family=tiled bm=256 bn=256 warps=4", Problem(256, 256, 256), "warps", "accumulator registers"),
    ("family=tiled bm=256 bn=256 bk=128 warps=8 stages=6", Problem(256, 256, 256), "warps", "accumulator"),
    ("family=tiled bm=128 bn=256 bk=128 warps=8 stages=6", Problem(256, 256, 256), "stages", "shared memory"),
    ("family=tiled split_k=16 bk=64", Problem(256, 256, 256), "split_k", "K-tiles"),
    ("family=tiled subtile=2", Problem(256, 256, 256), "subtile", "does not use subtile"),
    ("family=mma bm=16 bn=16 warps=8", Problem(256, 256, 256), "warps", "does not split"),
    # tile columns grouped along N: a CUDA template order (common.cuh); the Triton kernels group rows
    ("family=tiled group_m=-8", Problem(256, 256, 256), "group_m", "CUDA template order"),
    ("family=persistent group_m=-1", Problem(256, 256, 256), "group_m", "groups tile rows"),
    ("family=stream bm=64 bn=16 warps=4 stages=4 group_m=-1", Problem(16, 4096, 4096, "nt"), "group_m",
     "does not use group_m"),
])
def test_validation_messages(text, problem, field, needle):
    s = KernelSpec.parse(text)
    with pytest.raises(SpecError) as e:
        validate(s, problem, H)
    assert e.value.field == field, violations(s, problem, H)
    assert needle in str(e.value)


def test_group_m_takes_both_directions_in_the_cuda_families_only():
    p = Problem(1000, 3000, 1024)
    s = KernelSpec.parse("family=wgmma bm=128 bn=128 warps=12 stages=5 group_m=-8")
    assert s.group_m == -8 and KernelSpec.parse(s.text) == s and "group_m=-8" in s.tokens()
    assert is_valid(s, p, H)
    assert is_valid(KernelSpec.parse("family=mma bm=64 bn=64 bk=32 warps=4 stages=4 group_m=-1"), p, H)
    # The mask offers the column orders exactly where the template renders them.
    head = ("backend", "family", "bm", "bn", "bk", "warps", "stages")
    wg = dict(zip(head, ("cuda", "wgmma", 128, 128, 64, 12, 5)))
    tl = dict(zip(head, ("triton", "tiled", 128, 128, 64, 8, 3)))
    assert set(valid_values(wg, "group_m", p, H)) == set(CHOICES["group_m"])
    assert set(valid_values(tl, "group_m", p, H)) == {g for g in CHOICES["group_m"] if g > 0}


def test_smem_rule_uses_device_limit():
    s = KernelSpec.parse("family=tiled bm=128 bn=128 bk=64 warps=8 stages=5")  # 160 KB ring
    p = Problem(512, 512, 512)
    assert is_valid(s, p, H)
    small = DeviceInfo.target("sm_86")   # 99 KB per block
    assert any(f == "stages" for f, _ in violations(s, p, small))


def _sample(problem, rng):
    prefix = {}
    for f in FIELDS:
        vals = valid_values(prefix, f, problem, H)
        assert vals, f"dead end at {f} after {prefix}"
        prefix[f] = rng.choice(vals)
    return KernelSpec(**prefix)


def test_masked_sampling_never_yields_an_invalid_spec():
    rng = random.Random(0)
    sizes = [1, 7, 17, 64, 100, 1000, 3000, 4096]
    for _ in range(300):
        p = Problem(rng.choice(sizes), rng.choice(sizes), rng.choice(sizes), rng.choice(["nn", "nt"]))
        s = _sample(p, rng)
        assert is_valid(s, p, H), (s.text, p, violations(s, p, H))


def test_mask_excludes_exactly_the_values_with_no_valid_completion():
    p = Problem(100, 17, 1000)          # N % 8 != 0: no TMA families
    fams = valid_values({"backend": "cuda"}, "family", p, H)
    assert fams == ["mma", "stream"]    # stream: min(M, N) <= 64, A large (no N % 8 needed)
    assert valid_values({"backend": "cuda"}, "family", Problem(100, 100, 1000), H) == ["mma"]
    assert valid_values({"backend": "triton"}, "family", p, H) == ["tiled"]
    # wgmma tiles only where a valid spec exists
    q = Problem(4096, 4096, 4096)
    assert valid_values({"backend": "cuda", "family": "wgmma"}, "bm", q, H) == [64, 128, 256]


def test_enumerate_valid_agrees_with_validate():
    p = Problem(64, 128, 200, "nt")
    specs = list(enumerate_valid(p, H, backend="cuda"))
    assert specs and all(is_valid(s, p, H) for s in specs)
    assert len({s.text for s in specs}) == len(specs)   # canonical: no duplicates
    # every pinned field really is pinned
    assert all(s.subtile == 1 and s.cluster == 1 for s in specs if s.family == "mma")


def test_default_spec_fits_small_problems():
    s = default_spec("tiled", Problem(16, 64, 64), H)
    assert s.bm <= 16 and is_valid(s, Problem(16, 64, 64), H)
    with pytest.raises(SpecError):
        default_spec("wgmma", Problem(64, 17, 64), H)


def test_choices_cover_every_field():
    assert set(CHOICES) == set(FIELDS)
    assert all(getattr(KernelSpec(), f) in CHOICES[f] for f in FIELDS)


def test_no_rule_depends_on_a_field_it_does_not_need():
    """The mask's incremental form (spec_mask._rules_at) runs a rule only when a field it `needs` is chosen
    (and an _any_schedule rule again at warp_spec): sound only if no rule's verdict depends on another
    field. Checked by perturbation (rules also read fields through KernelSpec(**s), which no
    tracking dict sees): random full specs, valid or not, over odd and LLM shapes in both layouts;
    every other field set to each of its choices must leave each rule's pass / fail alone."""
    from cudal2.spec import RULES
    rng = random.Random(1)
    shapes = [(1, 4096, 4096), (7, 100, 1000), (100, 17, 1000), (4096, 4096, 4096), (64, 16384, 512),
              (12288, 128, 16384), (3000, 1000, 17)]
    for i in range(600):
        p = Problem(*rng.choice(shapes), rng.choice(["nn", "nt"]))
        # one in six a valid spec (the mask's), so the rules' deep branches run too
        spec = _sample(p, rng).to_dict() if i % 6 == 0 else {f: rng.choice(CHOICES[f]) for f in FIELDS}
        for _field, needs, check in RULES:
            free = set(FIELDS) - set(needs) - ({"warp_spec"} if getattr(check, "reads_schedule", False) else set())
            verdict = check(spec, p, H) is None
            for f in free:
                for v in CHOICES[f]:
                    assert (check({**spec, f: v}, p, H) is None) == verdict, \
                        f"{getattr(check, '__qualname__', check)} (needs {needs}) depends on {f} ({spec}, {f}={v}, {p})"


def test_incremental_mask_equals_the_reference_mask():
    """valid_values (only the rules a field can change, per node) against the reference form that
    re-applies every rule at every node (spec_mask._completable), on random prefixes of random problems."""
    from cudal2.spec_mask import _completable
    rng = random.Random(2)
    sizes = [1, 3, 17, 64, 100, 1000, 4096, 12288]
    for _ in range(60):
        p = Problem(rng.choice(sizes), rng.choice(sizes), rng.choice(sizes), rng.choice(["nn", "nt"]))
        prefix = {}
        for f in FIELDS:
            ref = [v for v in CHOICES[f] if _completable({**prefix, f: v}, FIELDS, p, H)]
            assert valid_values(prefix, f, p, H) == ref, (p, prefix, f)
            if not ref:
                break
            # mostly follow the mask, sometimes step off it (a dead prefix must give [] in both)
            prefix[f] = rng.choice(ref) if rng.random() < 0.9 else rng.choice(CHOICES[f])


def test_valid_values_refuses_a_prefix_out_of_order():
    with pytest.raises(ValueError, match="not the first 1"):
        valid_values({"family": "wgmma"}, "family", Problem(64, 64, 64), H)


def test_is_valid_is_not_violations():
    """is_valid stops at the first broken rule: the same verdict as listing them all, on random full
    specs (valid ones from the mask too) given as KernelSpec or as a dict, over odd and LLM shapes."""
    rng = random.Random(3)
    shapes = [(1, 4096, 4096), (7, 100, 1000), (100, 17, 1000), (4096, 4096, 4096), (64, 16384, 512),
              (12288, 128, 16384), (3000, 1000, 17)]
    seen = set()
    for i in range(3000):
        p = Problem(*rng.choice(shapes), rng.choice(["nn", "nt"]))
        d = rng.choice((H, DeviceInfo.target("sm_80")))
        spec = _sample(p, rng) if i % 10 == 0 else KernelSpec(**{f: rng.choice(CHOICES[f]) for f in FIELDS})
        want = not violations(spec, p, d)
        assert is_valid(spec, p, d) == want and is_valid(spec.to_dict(), p, d) == want, (spec.text, p, d.key)
        seen.add(want)
    assert seen == {True, False}
