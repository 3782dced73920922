"""cudal2.registry.transfer and bench/transfer_registry.py: another card's kernels timed and filed here."""
import dataclasses
import json
from pathlib import Path

import pytest

from bench_import import load_bench
from cudal2.problems import Problem
from cudal2.registry import Registry, RegistryError
from cudal2.registry import transfer

xfer = load_bench("transfer_registry")
NAMES = ["torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune"]


def _source(tmp_path, n_each=3):
    """An exported slice of the shipped registry: n_each entries of each backend and layout."""
    src = tmp_path / "src"
    Registry.load().export(src)
    reg = Registry.load(src)
    keep, seen = {}, {}
    for e in reg.all("h200-sm90"):
        k = (e.backend, e.problem.rsplit(":", 1)[1])
        if seen.get(k, 0) < n_each:
            seen[k] = seen.get(k, 0) + 1
            keep[e.problem] = e
    reg.entries = {"h200-sm90": keep}
    (src / "index.json").write_text(reg.to_json())
    return src, keep


def test_build_moves_kernel_entries_to_the_target_card_with_their_sources(tmp_path):
    src, keep = _source(tmp_path)
    out = tmp_path / "xfer"
    assert xfer.main(["build", "--registry", str(src), "--from", "h200-sm90", "--to", "h100-sm90",
                      "--out", str(out)]) == 0
    got = Registry.load(out)                      # loads cleanly: every entry valid, none refused
    assert got.bad == [] and set(got.entries) == {"h100-sm90"}
    kernels = {p: e for p, e in keep.items() if e.backend != "cublas"}
    assert set(got.entries["h100-sm90"]) == set(kernels)
    for p, e in got.entries["h100-sm90"].items():
        old = kernels[p]
        assert (e.backend, e.spec, e.sha256, e.source, e.time_us) == (old.backend, old.spec, old.sha256,
                                                                      old.source, old.time_us)
        assert e.scope is None
        assert got.read_source(e) == Registry.load(src).read_source(old)   # hash-checked copy
        assert got.lookup(Problem.parse(p), "h100-sm90") is e
        assert got.lookup(Problem.parse(p), "h200-sm90") is None
    shapes = [x for x in (out / "shapes.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert sorted(shapes) == sorted(kernels)
    # layouts alternate while both last: a compare cut short has timed some of each
    assert {s.rsplit(":", 1)[1] for s in shapes[:2]} == {"nn", "nt"}


def test_build_refuses_same_card_no_kernels_and_an_existing_registry(tmp_path):
    src, _ = _source(tmp_path, n_each=1)
    with pytest.raises(RegistryError, match="both h200-sm90"):
        transfer.for_timing(str(src), "h200-sm90", "h200-sm90", tmp_path / "a")
    with pytest.raises(RegistryError, match="no kernel entries for a100-sm80"):
        transfer.for_timing(str(src), "a100-sm80", "h100-sm90", tmp_path / "b")
    transfer.for_timing(str(src), "h200-sm90", "h100-sm90", tmp_path / "c")
    with pytest.raises(RegistryError, match="already holds a registry"):
        transfer.for_timing(str(src), "h200-sm90", "h100-sm90", tmp_path / "c")


def test_build_searched_only_leaves_out_transferred_entries_and_the_targets_own_kernels(tmp_path):
    """The H100 -> H200 direction: the H100's index holds kernels that came from the H200 (times.
    transferred_from) beside its own search's winners; only the latter are worth the H200's time,
    and of those not a kernel the H200 already files at that problem."""
    src, keep = _source(tmp_path, n_each=2)
    reg = Registry.load(src)
    kernels = [e for e in reg.all("h200-sm90") if e.backend != "cublas"]
    came, own_same, own_new = kernels[0], kernels[1], kernels[2:]
    # as the H100's: `came` transferred, `own_same` searched to the kernel the target already files
    for e in kernels:
        e.device = "h100-sm90"
    came.times = {**came.times, "transferred_from": {"device": "h200-sm90"}}
    target = tmp_path / "target"
    Registry.load().export(target)
    t = Registry.load(target)
    t.entries = {"h200-sm90": {own_same.problem: dataclasses.replace(own_same, device="h200-sm90")}}
    (target / "index.json").write_text(t.to_json())
    reg.entries = {"h100-sm90": {e.problem: e for e in kernels}}
    (src / "index.json").write_text(reg.to_json())
    moved = transfer.for_timing(str(src), "h100-sm90", "h200-sm90", tmp_path / "x", searched_only=True,
                                against=str(target))
    assert sorted(e.problem for e in moved) == sorted(e.problem for e in own_new)
    everything = transfer.for_timing(str(src), "h100-sm90", "h200-sm90", tmp_path / "y")
    assert len(everything) == len(kernels)
    with pytest.raises(RegistryError, match="left to time"):
        only = tmp_path / "only"
        Registry.load().export(only)
        o = Registry.load(only)
        o.entries = {"h100-sm90": {came.problem: came}}
        (only / "index.json").write_text(o.to_json())
        transfer.for_timing(str(only), "h100-sm90", "h200-sm90", tmp_path / "z", searched_only=True)


def _row(e, off=1.10, srv_torch=1.05, status="ok", spec=None):
    """A compare row of entry e on the target card: the kernel at `off` x best-cublas offline and
    `srv_torch` x torch.matmul in server mode (best-cublas 10 us, torch.matmul 10.2 us)."""
    p = e.prob
    r = {"shape": f"{p.M}x{p.N}x{p.K}", "M": p.M, "N": p.N, "K": p.K, "layout": p.layout,
         "cudal2_via": "kernel", "cudal2_spec": e.spec if spec is None else spec, "status_cudal2": status,
         "offline_best_cublas": "cublas-nn", "offline_best_cublas_us": 10.0,
         "offline_cudal2_vs_best": off, "offline_cudal2_median_us": 10.0 / off, "offline_cudal2_n": 100,
         "server_torch_mean_us": 12.0, "server_cudal2_mean_us": 12.0 / srv_torch}
    r.update({f"offline_{n}_median_us": 10.0 + i * 0.2 for i, n in enumerate(["cublas-nn", "torch", "cublaslt-heuristic"])})
    return r


def test_file_winners_applies_margin_guard_spec_and_check(tmp_path):
    src, keep = _source(tmp_path, n_each=3)
    ks = [e for e in keep.values() if e.backend != "cublas"]
    cub = next(e for e in keep.values() if e.backend == "cublas")
    assert len(ks) >= 6
    rows = [_row(ks[0]),                                   # files
            _row(ks[1], off=1.005),                        # under the margin
            _row(ks[2], srv_torch=0.95),                   # under the server guard
            _row(ks[3], status="invalid: wrong values"),   # failed a check here
            _row(ks[4], spec="backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8 "
                             "split_k=1 subtile=1 warp_spec=1 cluster=1"),   # another kernel timed
            _row(ks[5], off=1.02, srv_torch=0.97),         # exactly at the guard: files
            dict(_row(ks[0]), M=cub.prob.M, N=cub.prob.N, K=cub.prob.K, layout=cub.prob.layout)]
    doc = {"versions": {"device_key": "h100-sm90", "card": "NVIDIA H100 80GB HBM3"},
           "config": {"baselines": NAMES}, "runs": [{"ts": "2026-12-05T17:04:46Z"}], "rows": rows}
    reg = tmp_path / "reg"
    Registry.load().export(reg, "none-sm90")               # an empty registry directory
    filed, skipped = transfer.file_winners(str(reg), str(src), "h200-sm90", doc)
    assert sorted(e.problem for e in filed) == sorted([ks[0].problem, ks[5].problem])
    assert "under the margin" in skipped[ks[1].problem] and "under the guard" in skipped[ks[2].problem]
    assert "not checked here" in skipped[ks[3].problem] and "not the source entry's spec" in skipped[ks[4].problem]
    assert skipped[cub.problem] == "no kernel entry on the source card"
    got = Registry.load(reg)
    e = got.lookup(ks[0].prob, "h100-sm90")
    # the target card's times, the source card's kernel, its check pending until verify --gpu --record
    assert e.time_us == pytest.approx(10.0 / 1.10) and e.best_cublas_us == 10.0
    assert e.speedup() == pytest.approx(1.10)
    assert e.baselines_us == {"cublas-nn": 10.0, "torch": 10.2, "cublaslt-heuristic": 10.4}
    assert e.check["passed"] is None and "h100-sm90" in e.check["reason"]
    assert e.times["transferred_from"]["device"] == "h200-sm90" and e.scope is None
    assert (e.spec, e.sha256) == (ks[0].spec, ks[0].sha256)
    assert got.read_source(e) == Registry.load(src).read_source(ks[0])
    assert got.lookup(ks[0].prob, "h200-sm90") is None
    # filed again from the same compare: the held entries are as fast, nothing replaced
    again, skipped2 = transfer.file_winners(str(reg), str(src), "h200-sm90", doc)
    assert again == [] and "already holds a kernel" in skipped2[ks[0].problem]


def test_file_winners_keeps_out_a_kernel_the_server_guard_took_out(tmp_path):
    from cudal2.registry import server_guard
    src, keep = _source(tmp_path, n_each=2)
    ks = [e for e in keep.values() if e.backend != "cublas"][:2]
    doc = {"versions": {"device_key": "h100-sm90"}, "config": {"baselines": NAMES},
           "rows": [_row(ks[0]), _row(ks[1])]}
    reg = tmp_path / "reg"
    Registry.load().export(reg, "none-sm90")
    assert len(transfer.file_winners(str(reg), str(src), "h200-sm90", doc)[0]) == 2
    # a later compare found ks[0] at 0.95x of torch.matmul cold: the guard re-files it as cuBLAS
    moved = server_guard(reg, "h100-sm90", {ks[0].problem: {"cudal2": 10.0, "torch": 9.5}}, 0.97)
    assert [e.problem for e, _ in moved] == [ks[0].problem]
    # a new transfer compare passing the guard again does not bring the same kernel back
    doc2 = dict(doc, rows=[_row(ks[0], off=1.2), _row(ks[1], off=1.2)])
    filed, skipped = transfer.file_winners(str(reg), str(src), "h200-sm90", doc2)
    assert [e.problem for e in filed] == [ks[1].problem]          # the faster win replaces its own
    assert "a guard took this kernel out" in skipped[ks[0].problem] and "server" in skipped[ks[0].problem]
    assert Registry.load(reg).lookup(ks[0].prob, "h100-sm90").backend == "cublas"


def test_file_winners_refuses_a_compare_without_card_or_of_the_source_card(tmp_path):
    src, _ = _source(tmp_path, n_each=1)
    with pytest.raises(RegistryError, match="no device_key"):
        transfer.file_winners(str(src), str(src), "h200-sm90", {"rows": []})
    with pytest.raises(RegistryError, match="ran on h200-sm90 itself"):
        transfer.file_winners(str(src), str(src), "h200-sm90", {"versions": {"device_key": "h200-sm90"}})
    with pytest.raises(RegistryError, match="guard"):
        transfer.file_winners(str(src), str(src), "h200-sm90", {"versions": {"device_key": "h100-sm90"}}, guard=1.5)


def test_script_dry_run_files_nothing(tmp_path, capsys):
    src, keep = _source(tmp_path, n_each=1)
    k = next(e for e in keep.values() if e.backend != "cublas")
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"versions": {"device_key": "h100-sm90"}, "config": {"baselines": NAMES},
                             "rows": [_row(k)]}))
    before = (src / "index.json").read_text()
    assert xfer.main(["file", str(f), "--from", "h200-sm90", "--src", str(src), "--registry", str(src),
                      "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"file h100-sm90/{k.problem}: 1.100x" in out and "would file 1, skipped 0" in out
    assert (src / "index.json").read_text() == before


def test_report_counts_filed_shapes_at_dispatch_time_and_the_rest_at_torch_matmul():
    rep = load_bench("transfer_report")
    # two small nt shapes (< 1 GFLOP): one filed (re-timed 1.2x), one not (torch.matmul 0.9 of best)
    xfer = {"rows": [
        {"shape": "64x64x64", "M": 64, "N": 64, "K": 64, "layout": "nt", "offline_cudal2_vs_best": 1.1,
         "server_cudal2_vs_best": 1.05, "offline_torch_vs_best": 1.0, "server_torch_vs_best": 1.0},
        {"shape": "128x64x64", "M": 128, "N": 64, "K": 64, "layout": "nt", "offline_cudal2_vs_best": 0.8,
         "server_cudal2_vs_best": 0.8, "offline_torch_vs_best": 0.9, "server_torch_vs_best": 0.9}]}
    disp = {"rows": [{"shape": "64x64x64", "layout": "nt", "offline_cudal2_vs_best": 1.2,
                      "server_cudal2_vs_best": 1.1, "offline_cudal2_speedup_torch": 1.25}]}
    src = {"64x64x64:nt": {"time_us": 5.0, "best_cublas_us": 6.0}, "128x64x64:nt": {"time_us": 5.0, "best_cublas_us": 5.5}}
    rows = {(r["layout"], r["class"]): r for r in rep.table(xfer, disp, src)}
    a = rows[("nt", "small")]
    strip = lambda r: {k: v for k, v in r.items() if k not in ("layout", "class")}   # noqa: E731
    assert strip(a) == strip(rows[("all", "all")]) == strip(rows[("nt", "all")]) and a["shapes"] == 2 and a["filed"] == 1 and a["here_won"] == 1
    assert a["here_offline"] == pytest.approx((1.1 * 0.8) ** 0.5)
    assert a["source_filed"] == pytest.approx((1.2 * 1.1) ** 0.5)
    assert a["dispatched_offline"] == pytest.approx((1.2 * 0.9) ** 0.5)      # the unfiled one at torch.matmul's
    assert a["dispatched_server"] == pytest.approx((1.1 * 0.9) ** 0.5)
    assert a["worst_vs_torch"] == 1.0
    assert "| nt | small | 2 | 0.938 (1) |" in rep.markdown(list(rows.values()), "h200-sm90", "h100-sm90")


# ---- cudal2 registry transfer (the one-command form; its compare stubbed: no GPU here) ----------

def _cli(args):
    from typer.testing import CliRunner
    from cudal2.cli import app
    return CliRunner().invoke(app, ["registry", "transfer", *args])


def test_cli_refuses_the_shipped_registry_a_missing_one_and_a_card_without_kernels(tmp_path):
    r = _cli(["--from", "h200-sm90", "--registry", str(Registry.load().root), "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "shipped registry is read-only" in r.output
    r = _cli(["--from", "h200-sm90", "--registry", str(tmp_path / "nope"), "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "does not exist" in r.output
    reg = tmp_path / "reg"
    Registry.load().export(reg, "none-sm90")
    r = _cli(["--from", "a100-sm80", "--registry", str(reg), "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and "no kernel entries for a100-sm80" in r.output
    r = _cli(["--from", "h200-sm90", "--registry", str(reg), "--json", str(tmp_path / "c.json"), "--time-limit", "0"])
    assert r.exit_code == 2 and "--time-limit must be > 0" in r.output


def test_cli_without_a_gpu_says_so(tmp_path, monkeypatch):
    import cudal2.device
    monkeypatch.setattr(cudal2.device, "gpu_available", lambda: False)
    reg = tmp_path / "reg"
    Registry.load().export(reg, "none-sm90")
    r = _cli(["--from", "h200-sm90", "--registry", str(reg), "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 3 and "no CUDA GPU here" in r.output


def test_cli_builds_compares_and_files(tmp_path, monkeypatch):
    """The glue: the scratch registry the compare gets holds the source kernels under this card's
    key; the compare's rows are what the filing reads; the winners land in --registry."""
    import cudal2.cli.compare
    import cudal2.device
    from cudal2.device import DeviceInfo
    src, keep = _source(tmp_path, n_each=1)
    ks = [e for e in keep.values() if e.backend != "cublas"]
    card = DeviceInfo(name="NVIDIA H100 PCIe", cc=(9, 0), smem_per_block=232448, smem_per_sm=233472,
                      regs_per_sm=65536, sm_count=114)
    monkeypatch.setattr(cudal2.device, "gpu_available", lambda: True)
    monkeypatch.setattr(cudal2.device, "current", lambda index=None: card)
    seen = {}
    import inspect
    compare_params = set(inspect.signature(cudal2.cli.compare.compare_cmd).parameters)

    def fake_compare(**kw):
        # every compare option passed by name: a new one left out would arrive as typer's
        # OptionInfo default, not a value
        assert set(kw) == compare_params, set(kw) ^ compare_params
        scratch = Registry.load(kw["registry"])
        seen["keys"] = sorted(e.key for e in scratch.all())
        seen["mode"], seen["resume"], seen["time_limit"] = kw["mode"], kw["resume"], kw["time_limit"]
        rows = [_row(e, off=1.2 if i == 0 else 0.9) for i, e in enumerate(ks)]
        Path(kw["json_path"]).write_text(json.dumps({"versions": {"device_key": card.key},
                                                     "config": {"baselines": NAMES}, "rows": rows}))
    monkeypatch.setattr(cudal2.cli.compare, "compare_cmd", fake_compare)
    reg = tmp_path / "reg"
    Registry.load().export(reg, "none-sm90")
    r = _cli(["--from", "h200-sm90", "--src", str(src), "--registry", str(reg), "--json", str(tmp_path / "c.json"),
              "--time-limit", "250"])
    assert r.exit_code == 0, r.output
    assert seen == {"keys": sorted(f"h100-pcie-sm90/{e.problem}" for e in ks), "mode": "both", "resume": True,
                    "time_limit": 250.0}
    got = Registry.load(reg).all("h100-pcie-sm90")
    assert [e.problem for e in got] == [ks[0].problem] and got[0].speedup() == pytest.approx(1.2)
    assert f"kept out h100-pcie-sm90/{ks[1].problem}: offline 0.900x" in r.output
    assert f"1 of {len(ks)} h200-sm90 kernels filed" in r.output and "verify --gpu --render --record" in r.output
