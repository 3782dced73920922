"""bench/decode_trim.py without a GPU: its plan (valid specs that may trim, the stream rule's picks)
and its refusals; the timing itself needs a card (bench/device_run.sh's plan in NOTES.md)."""
import dataclasses

import pytest

from cudal2.device import DeviceInfo
from cudal2.spec import is_valid
from bench_import import load_bench


def _module():
    return load_bench("decode_trim")


def test_plan_holds_valid_single_cta_wgmma_and_stream_specs():
    dt = _module()
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    work = dt.decode_set([dt.CONFIGS / f"{m}.json" for m in dt.DECODE_MODELS], (1, 16))
    assert work and all(p.layout == "nt" and p.M in (1, 16) for _, _, p in work)
    for _, _, p in work:
        pl = dt.plan(p, dev, 6, 2)
        assert 1 <= len(pl["wgmma"]) <= 6 and len(pl["stream"]) == 2
        # A_TRIM refuses a 2-CTA cluster at compile time: the plan never holds one
        assert all(s.family == "wgmma" and s.cluster == 1 and is_valid(s, p, dev) for s in pl["wgmma"])
        assert all(s.family == "stream" and is_valid(s, p, dev) for s in pl["stream"])


def test_a_plan_spec_compiles_untrimmed():
    dt = _module()
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    _, _, p = dt.decode_set([dt.CONFIGS / "llama-3-8b.json"], (1,))[0]
    spec = dt.plan(p, dev, 1, 0)["wgmma"][0]
    got = dt.compile_pairs([(p.text, spec.text, "A_TRIM=0", dt.UNTRIM)], 1)
    same, err = got[(p.text, "A_TRIM=0")]
    assert err is None and same is not True       # it compiles, to other SASS than the default (trimmed)


def test_bad_arguments_are_refused(tmp_path):
    dt = _module()
    for bad in (["--tokens", "0"], ["--wgmma", "0"], ["--tokens", ","]):
        with pytest.raises(SystemExit):
            dt.main(["--out", str(tmp_path), *bad])
    assert not any(tmp_path.iterdir())
