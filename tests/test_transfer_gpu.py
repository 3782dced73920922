"""GPU: the transfer end to end on whatever card runs it. Another card's shipped kernel entries
(the H100's on an H200, the H200's elsewhere) are built for this card, compared here beside the
baselines by `cudal2 compare`, filed from that compare, and served by cudal2.matmul.

The test checks the mechanics, not speed: margin 1.0 and a guard of 0.01 file every checked
kernel, whatever its time. Error bound: PROTOCOL.md's normwise relative error 5e-3 against the
fp32 reference (fp16 output rounding alone is ~2e-4)."""
import json

import pytest
import torch

import cudal2
from cudal2 import ops
from cudal2.check import reference, rel_error
from cudal2.problems import Problem
from cudal2.registry import Registry
from cudal2.registry import transfer

pytestmark = pytest.mark.gpu


def _source_card(here: str) -> str:
    return "h100-sm90" if here != "h100-sm90" else "h200-sm90"


def test_transfer_compare_file_and_dispatch(tmp_path, gpu_device):
    from typer.testing import CliRunner
    from cudal2.cli import app
    src_key = _source_card(gpu_device.key)
    shipped = Registry.load()
    # two small kernel entries of the other card, one per layout (fast to compare)
    picks = {}
    for e in shipped.all(src_key):
        p = e.prob
        if e.backend != "cublas" and p.M * p.N * p.K <= 2 ** 27:
            picks.setdefault(p.layout, e)
    assert set(picks) == {"nn", "nt"}, picks
    src = tmp_path / "src"
    shipped.export(src, src_key)
    reg = Registry.load(src)
    reg.entries = {src_key: {e.problem: e for e in picks.values()}}
    (src / "index.json").write_text(reg.to_json())
    scratch = tmp_path / "scratch"
    moved = transfer.for_timing(str(src), src_key, gpu_device.key, scratch)
    assert sorted(e.problem for e in moved) == sorted(e.problem for e in picks.values())
    out = tmp_path / "cmp.json"
    r = CliRunner().invoke(app, ["compare", "--shapes", str(scratch / "shapes.txt"), "--registry", str(scratch),
                                 "--mode", "both", "--baselines", "torch,cublas-nn,cublaslt-heuristic",
                                 "--min-ms", "2", "--server-calls", "5", "--json", str(out), "--no-table"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert {row["status_cudal2"] for row in doc["rows"]} == {"ok"}          # checked on this card
    assert doc["versions"]["device_key"] == gpu_device.key
    target = tmp_path / "target"
    Registry.load().export(target, "none-sm90")                              # an empty registry
    filed, skipped = transfer.file_winners(str(target), str(src), src_key, doc, margin=1.0, guard=0.01)
    rows = {Problem(x["M"], x["N"], x["K"], x["layout"]).text: x for x in doc["rows"]}
    assert skipped == {} or all("under the margin" in w for w in skipped.values())
    assert filed, skipped
    ops.set_registry(target)
    try:
        for e in filed:
            assert e.device == gpu_device.key
            assert e.time_us == rows[e.problem]["offline_cudal2_median_us"]     # this card's time
            p = e.prob
            g = torch.Generator(device="cuda").manual_seed(1)
            a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
            b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
            c = cudal2.matmul(a, b, layout=p.layout)
            assert ops.plan_info(a, b, p.layout).startswith(f"kernel {e.key} (exact"), ops.plan_info(a, b, p.layout)
            assert rel_error(c, reference(a, b, p.layout)) <= 5e-3
    finally:
        ops.set_registry(None)
