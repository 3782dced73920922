"""The bad inputs a new user hit (issue 18), each refused with one clear line and a non-zero exit,
never a traceback, a silent success on a path that does not exist, or a run the machine cannot
finish; plus `cudal2 --version` and help(cudal2)."""
import dataclasses
import json
import subprocess
import sys
import warnings

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.registry import Entry, Registry, RegistryError

DEV = "h200-sm90"


def run(*args, timeout=120):
    """A subprocess: `check --interpret` sets TRITON_INTERPRET, which must not leak into this process."""
    return subprocess.run([sys.executable, "-m", "cudal2.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def invoke(*args):
    r = CliRunner().invoke(app, [*map(str, args)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def one_error_line(stderr: str, needle: str) -> bool:
    lines = stderr.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0] and "Traceback" not in stderr


@pytest.mark.parametrize("args,code,needle", [
    # 10 minutes and 2.2 GB before: refused at once, the limit named.
    (["--backend", "triton", "--interpret", "--shape", "1000000000x1x1"], 2,
     "the Triton interpreter is limited to 2^26"),
    (["--backend", "triton", "--interpret", "--shape", "1x1x100000000"], 2, "limited to 2^26"),
    # Failed inside the compiler before: refused, with the 32-bit limit.
    (["--backend", "triton", "--shape", "99999999999999999999x1x1", "--compile-only"], 2,
     "A would have 1e+20 elements; cudal2 kernels take at most 2^31-1 per operand"),
    (["--backend", "cuda", "--shape", "70000x70000x1", "--compile-only"], 2, "C would have 4.9e+09 elements"),
    # Said "the CUDA backend needs a GPU" before.
    (["--backend", "foo", "--interpret", "--shape", "64x64x64"], 2, "--backend 'foo': choose triton or cuda"),
])
def test_check_refuses(args, code, needle):
    r = run("check", *args, timeout=60)
    assert r.returncode == code and one_error_line(r.stderr, needle), r.stderr


def test_check_interpreter_limit_is_the_tiles_work():
    from cudal2.cli.check import INTERPRET_MAX_MACS, _interpret_refusal
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    spec = KernelSpec.parse("backend=triton family=tiled bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8")
    assert _interpret_refusal(Problem(1024, 1024, 16), spec) is None             # 2^26 exactly (K padded to 64): 34 s measured
    assert _interpret_refusal(Problem(1025, 1024, 16), spec).startswith("--interpret: 1025x1024x16 is 7.55e+07")
    assert INTERPRET_MAX_MACS == 2**26


@pytest.mark.parametrize("cmd", ["generate", "compare"])
def test_missing_shapes_file_is_named(cmd):
    extra = ["--replay", "nowhere.db"] if cmd == "generate" else []
    r = invoke(cmd, "--shapes", "missing.txt", *extra)
    assert r.exit_code == 2
    assert "error: --shapes 'missing.txt': no such file, and not grid, grid:N or MxNxK" in r.output


@pytest.mark.parametrize("sub", [["list"], ["verify"], ["show", "64x64x64"], ["export", "x"],
                                 ["apply-margin", "--margin", "1.01"]])
def test_registry_path_that_does_not_exist(sub, tmp_path):
    r = invoke("registry", *sub, "--registry", tmp_path / "nonexistent")
    assert r.exit_code == 2
    assert f"error: registry {tmp_path / 'nonexistent'} does not exist" in r.output
    assert not (tmp_path / "nonexistent").exists() and not (tmp_path / "x").exists()


def test_registry_directory_without_index(tmp_path):
    r = invoke("registry", "list", "--registry", tmp_path)
    assert r.exit_code == 2 and f"registry {tmp_path} has no index.json: not a cudal2 registry" in r.output


def test_load_refuses_a_missing_root(tmp_path):
    with pytest.raises(RegistryError, match="does not exist"):
        Registry.load(tmp_path / "nope")
    assert Registry.load(tmp_path / "nope", create=True).all() == []            # what filing uses
    assert not (tmp_path / "nope").exists()                                      # created by add(), not load


def _hand_edited(tmp_path, field, value):
    root = tmp_path / "reg"
    reg = Registry.load(root, create=True)
    reg.add(Entry(problem="128x128x128:nn", device=DEV, backend="cublas", time_us=2.0, best_cublas_us=2.0,
                  best_cublas="torch", baselines_us={"torch": 2.0}), None)
    reg.add(Entry(problem="128x128x256:nn", device=DEV, backend="cublas", time_us=3.0, best_cublas_us=3.0), None)
    idx = root / "index.json"
    data = json.loads(idx.read_text())
    data["devices"][DEV]["entries"]["128x128x128:nn"][field] = value
    idx.write_text(json.dumps(data))
    return root


@pytest.mark.parametrize("field,value,needle", [
    ("time_us", "abc", "time_us must be a positive number or null, got 'abc'"),
    ("best_cublas_us", -1.0, "best_cublas_us must be a positive number or null, got -1.0"),
    ("baselines_us", {"torch": "fast"}, "baselines_us must map names to positive numbers"),
    ("times", [], "times must be an object"),
])
def test_hand_edited_entry_is_refused_everywhere(tmp_path, field, value, needle):
    root = _hand_edited(tmp_path, field, value)
    key = f"{DEV}/128x128x128:nn"
    with pytest.warns(UserWarning, match=f"refusing entry {key}: .*{needle.split(',')[0]}"):
        reg = Registry.load(root)
    assert [e.problem for e in reg.all()] == ["128x128x256:nn"] and reg.bad[0][0] == key
    r = invoke("registry", "list", "--registry", root)                       # crashed before
    assert r.exit_code == 0 and f"refused entry {key}: " in r.output and needle in r.output
    assert "1 entries; 1 refused at load" in r.output and "Traceback" not in r.output
    r = invoke("registry", "show", "128x128x128", "--registry", root)         # crashed before
    assert r.exit_code == 1 and "error: the entry for 128x128x128:nn" in r.output and "refused at load" in r.output
    r = invoke("registry", "verify", "--no-gpu", "--registry", root)          # passed before
    assert r.exit_code == 1 and f"bad entry {key}: " in r.output and "1 ok, 1 bad" in r.output


def test_dispatch_of_a_refused_entry_is_cublas_not_a_neighbour(tmp_path, hopper):
    """The refused entry's problem goes to torch.matmul (cuBLAS), not to the nearest entry."""
    from cudal2 import ops
    from cudal2.problems import Problem
    root = _hand_edited(tmp_path, "time_us", "abc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops.set_registry(root)
    dev = dataclasses.replace(hopper, name="NVIDIA H200", sm_count=1)
    try:
        with pytest.warns(RuntimeWarning, match=f"entry {DEV}/128x128x128:nn was refused at load"):
            kern, info = ops._choose(Problem(128, 128, 128), dev, 0, strict=False)
        assert kern is None and info.startswith("torch: entry refused at load (")
        with pytest.raises(RegistryError, match="refused at load"):
            ops._choose(Problem(128, 128, 128), dev, 0, strict=True)
    finally:
        ops.set_registry(None)


def test_export_to_an_unwritable_place():
    r = invoke("registry", "export", "/proc/x")
    assert r.exit_code == 1 and r.output.startswith("error: cannot export to /proc/x: ")
    assert "Traceback" not in r.output


def test_replay_of_a_broken_gzip(tmp_path):
    bad = tmp_path / "store.db.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not gzip")
    r = invoke("generate", "--replay", bad, "--shapes", "64x64x64", "--store", tmp_path / "s.db")
    assert r.exit_code == 2 and f"error: --replay {bad}: not a readable gzip file" in r.output


def test_version_and_help():
    import cudal2
    r = invoke("--version")
    assert r.exit_code == 0 and r.output == f"cudal2 {cudal2.__version__}\n"
    import pydoc
    text = pydoc.render_doc(cudal2, renderer=pydoc.plaintext)
    funcs = text[text.index("FUNCTIONS"):]
    for name in ("matmul(", "patch_linear(", "unpatch_linear("):
        assert name in funcs


@pytest.mark.parametrize("exc,code,want", [
    (RegistryError("registry /x does not exist"), 2, "error: registry /x does not exist"),
    (ZeroDivisionError("division by zero"), 1,
     "error: internal error, ZeroDivisionError: division by zero (CUDAL2_DEBUG=1 shows the traceback)"),
])
def test_cli_main_never_prints_a_traceback(monkeypatch, capsys, exc, code, want):
    """Whatever escapes a command (a RegistryError from a path deep inside compare, or a bug) ends
    as one line and a non-zero exit; CUDAL2_DEBUG=1 re-raises for whoever debugs it."""
    import importlib
    cli = importlib.import_module("cudal2.cli.app")     # the module (cudal2.cli.app is also the typer app)

    def boom():
        raise exc
    monkeypatch.setattr(cli, "app", boom)
    monkeypatch.delenv("CUDAL2_DEBUG", raising=False)
    with pytest.raises(SystemExit) as ex:
        cli.main()
    assert ex.value.code == code and capsys.readouterr().err == want + "\n"
    monkeypatch.setenv("CUDAL2_DEBUG", "1")
    if code == 1:
        with pytest.raises(ZeroDivisionError):
            cli.main()


def test_generate_never_files_into_the_shipped_registry(tmp_path, monkeypatch):
    """The replay used to file into the installed package's registry when no --registry was given."""
    from cudal2.registry import shipped_root
    monkeypatch.setenv("CUDAL2_REGISTRY", str(shipped_root()))
    r = invoke("generate", "--replay", tmp_path / "none.db", "--shapes", "64x64x64", "--store", tmp_path / "s.db")
    assert r.exit_code == 2 and "is the shipped registry, which generate does not write" in r.output
    monkeypatch.delenv("CUDAL2_REGISTRY")
    r = invoke("generate", "--replay", tmp_path / "none.db", "--shapes", "64x64x64", "--store", tmp_path / "s.db")
    assert r.exit_code == 2 and "no such store" in r.output          # the default (runs/registry) passes
