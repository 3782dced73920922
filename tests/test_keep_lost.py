"""`cudal2 registry keep-lost` on a made-up registry and sweep CSV (numbers are the test's): the
closest checked kernel of a shape lands on its cuBLAS entry, not on a kernel entry, a guard's re-file
or an entry that names a kernel already; a failed row and an invalid spec change nothing; the shipped registry
and a file that is not a sweep CSV are refused."""
import json

from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry
from cudal2.spec import KernelSpec

DEV = "h100-sm90"
WG = "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=4"
MMA = "backend=cuda family=mma bm=64 bn=64 bk=32 warps=4 stages=4"
TILED = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
runner = CliRunner()
HEAD = "shape,layout,class,spec,status,best_cublas,best_cublas_us,us,spread,vs_best_cublas,tflops,cluster_ctas,from,baselines_missing"


def _cublas(problem, times=None):
    return Entry(problem=Problem.parse(problem).text, device=DEV, backend="cublas", time_us=6.0,
                 best_cublas_us=6.0, best_cublas="torch", baselines_us={"torch": 6.0}, times=times or {})


def _registry(tmp_path):
    reg = Registry.load(tmp_path, create=True)
    reg.add(_cublas("256x256x512:nt"), None)
    reg.add(_cublas("128x128x512:nt", {"refiled": "server 0.95x of torch.matmul under guard 0.97",
                                       "best_kernel_us": 6.3, "best_kernel_spec": KernelSpec.parse(WG).text}), None)
    k = Entry(problem="512x512x512:nt", device=DEV, backend="triton", spec=KernelSpec.parse(TILED).text,
              time_us=5.0, best_cublas_us=6.0, best_cublas="torch", baselines_us={"torch": 6.0})
    reg.add(k, "# generated kernel\nimport triton\n")
    return reg


def _row(shape, spec, status, best, us):
    return f"{shape},nt,small,{spec},{status},torch,{best},{us},0.01,{best / us:.4f},1.0,,wave,"


def test_keep_lost_keeps_the_closest_checked_kernel_on_cublas_entries_only(tmp_path):
    _registry(tmp_path / "reg")
    bad_spec = "backend=cuda family=wgmma bm=64 bn=64 bk=48 warps=8 stages=4"      # bk 48: no such wgmma tile
    csv = tmp_path / "run1_sweep.csv"
    csv.write_text("\n".join(["# python3 bench/hopper_sweep.py ...", HEAD,
                              _row("256x256x512", WG, "ok", 6.0, 6.5),                 # 0.923
                              _row("256x256x512", TILED, "ok", 5.8, 6.0),              # 0.967: the closest
                              _row("256x256x512", WG.replace("stages=4", "stages=2"), "wrong: checker", 6.0, 4.0),
                              _row("256x256x512", bad_spec, "ok", 6.0, 5.0),
                              _row("128x128x512", TILED, "ok", 6.0, 5.9),              # a guard's re-file
                              _row("512x512x512", WG, "ok", 6.0, 5.5)]) + "\n")        # a kernel entry
    r = runner.invoke(app, ["registry", "keep-lost", str(csv), "--device", DEV, "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0, r.output
    assert "kept a losing kernel on 1 cuBLAS entries; 2 shapes left alone" in r.output
    reg = Registry.load(tmp_path / "reg")
    e = reg.entries[DEV]["256x256x512:nt"]
    assert e.backend == "cublas" and e.time_us == 6.0 and e.times["best_kernel_spec"] == KernelSpec.parse(TILED).text
    assert e.times["best_kernel_us"] == 6.0 and abs(e.times["best_kernel_vs_best_cublas"] - 5.8 / 6.0) < 1e-12
    assert e.times["best_kernel_run"] == "run1_sweep.csv"
    assert reg.entries[DEV]["128x128x512:nt"].times["best_kernel_us"] == 6.3
    assert reg.entries[DEV]["512x512x512:nt"].backend == "triton"
    # a later sweep changes nothing, farther or closer: the entry names a kernel now
    before = (tmp_path / "reg" / "index.json").read_bytes()
    far = tmp_path / "run2_sweep.csv"
    far.write_text("\n".join([HEAD, _row("256x256x512", WG, "ok", 6.0, 7.0), _row("256x256x512", MMA, "ok", 6.0, 5.9)])
                   + "\n")
    r = runner.invoke(app, ["registry", "keep-lost", str(far), "--device", DEV, "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0 and "1: it names a kernel already" in r.output
    assert (tmp_path / "reg" / "index.json").read_bytes() == before


def test_keep_lost_refuses_the_shipped_registry_and_a_file_that_is_no_sweep(tmp_path):
    _registry(tmp_path / "reg")
    other = tmp_path / "x.csv"
    other.write_text("shape,layout,ratio\n256x256x512,nt,1.0\n")
    r = runner.invoke(app, ["registry", "keep-lost", str(other), "--device", DEV, "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 1 and "not a sweep CSV" in r.output
    r = runner.invoke(app, ["registry", "keep-lost", str(other), "--device", "h200-sm90", "--registry",
                            str(tmp_path / "reg")])
    assert r.exit_code == 1 and "no entries for 'h200-sm90'" in r.output
    from cudal2.registry import shipped_root
    r = runner.invoke(app, ["registry", "keep-lost", str(other), "--device", DEV, "--registry", str(shipped_root())])
    assert r.exit_code == 1 and "read-only" in r.output
    assert json.loads((tmp_path / "reg" / "index.json").read_text())
