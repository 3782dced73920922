"""cudal2.matmul on the CPU: the bad-input table, a 1000-call fuzz against float64, the kernel plan's
copy/alignment/out handling (with a stand-in kernel), registry refusal in dispatch, the torch op."""
import dataclasses
import random
import warnings

import pytest
import torch

import cudal2
from cudal2 import ops, plans
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry

DEV = "h200-sm90"


@pytest.fixture(autouse=True)
def fresh():
    ops.clear_cache()
    yield
    ops.clear_cache()


def ref64(a, b, layout):
    bb = b.double() if layout == "nn" else b.double().t()
    return a.double() @ bb


U = {torch.float16: 2**-11, torch.bfloat16: 2**-8, torch.float32: 2**-24, torch.float64: 2**-53}


def close(c, a, b, layout):
    """Elementwise Higham bound for a K-term dot product computed and rounded in c's precision:
    |C - ref| <= (K + 2) u (|A| |B|). Holds for any summation order or accumulator at least as
    precise as the output, so it is exact enough to catch a wrong layout, a stale or unwritten
    output, or a misread stride (errors of order |C| itself), yet never flaky. The absolute term is
    the subnormal spacing per operation: products that underflow (fp16 below 6e-5) lose absolute,
    not relative, precision."""
    if c.numel() == 0:
        return True
    K = a.shape[-1]
    fi = torch.finfo(c.dtype)
    bound = (K + 2) * (U[c.dtype] * ref64(a.abs(), b.abs(), layout) + fi.smallest_normal * fi.eps)
    return bool(((c.double() - ref64(a, b, layout)).abs() <= bound).all())


def test_cpu_falls_back_and_says_so_once():
    a, b = torch.randn(33, 40), torch.randn(40, 17)
    with pytest.warns(RuntimeWarning, match="cpu tensors.*torch.matmul"):
        c = cudal2.matmul(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # the second call is silent
        c2 = cudal2.matmul(a, b)
    assert close(c, a, b, "nn")
    assert torch.equal(c, c2)
    assert ops.plan_info(a, b).startswith("torch: cpu tensors")


def test_strict_raises():
    with pytest.raises(ValueError, match="strict=True.*cpu"):
        cudal2.matmul(torch.randn(4, 4), torch.randn(4, 4), strict=True)


@pytest.mark.parametrize("a_shape,b_shape,layout,exc,match", [
    ((4, 5), (6, 7), "nn", ValueError, r"inner dimensions differ: a \(4, 5\).*b \(6, 7\)"),
    ((4, 5), (7, 6), "nt", ValueError, r"inner dimensions differ: a \(4, 5\).*b \(7, 6\)"),
    ((4, 5), (2, 5, 3), "nn", ValueError, "b must be 2-D"),
    ((5,), (5, 3), "nn", ValueError, "at least 2-D"),
    ((4, 5), (5, 3), "tn", ValueError, "layout must be one of"),
])
def test_bad_shapes(a_shape, b_shape, layout, exc, match):
    with pytest.raises(exc, match=match):
        cudal2.matmul(torch.randn(a_shape), torch.randn(b_shape), layout=layout)


def test_bad_types_and_dtypes():
    with pytest.raises(TypeError, match="takes tensors"):
        cudal2.matmul([[1.0]], torch.randn(1, 1))
    with pytest.raises(ValueError, match="float16 but b is torch.float32"):
        cudal2.matmul(torch.randn(4, 4).half(), torch.randn(4, 4))


def test_out_checked_and_written():
    a, b = torch.randn(6, 8), torch.randn(5, 8)
    with pytest.warns(RuntimeWarning):
        with pytest.raises(ValueError, match=r"out is \(5, 6\).*result is \(6, 5\)"):
            cudal2.matmul(a, b, layout="nt", out=torch.empty(5, 6))
    with pytest.raises(ValueError, match="torch.float16"):
        cudal2.matmul(a, b, layout="nt", out=torch.empty(6, 5, dtype=torch.float16))
    out = torch.full((6, 5), float("nan"))
    r = cudal2.matmul(a, b, layout="nt", out=out)
    assert r is out and close(out, a, b, "nt")


@pytest.mark.parametrize("M,N,K", [(0, 5, 4), (3, 0, 4), (3, 5, 0)])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_zero_size(M, N, K, layout):
    a = torch.randn(M, K)
    b = torch.randn(K, N) if layout == "nn" else torch.randn(N, K)
    with pytest.warns(RuntimeWarning):
        c = cudal2.matmul(a, b, layout=layout)
    assert c.shape == (M, N) and torch.equal(c, torch.zeros(M, N))     # K=0: the empty sum is 0


def _operand(shape, dtype, kind, rng):
    """A tensor of `shape` that is contiguous, transposed, sliced (strided) or offset (misaligned)."""
    r, c = shape
    if kind == "t":
        return torch.randn(c, r, dtype=torch.float32).to(dtype).t()
    if kind == "slice":
        return torch.randn(r, 2 * c + 1, dtype=torch.float32).to(dtype)[:, 1::2]
    if kind == "offset":
        return torch.randn(r * c + 3, dtype=torch.float32).to(dtype)[3:].view(r, c)
    return torch.randn(r, c, dtype=torch.float32).to(dtype)


def test_fuzz_against_float64():
    rng = random.Random(1234)
    torch.manual_seed(1234)        # operand values too, so a failure is reproducible
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    kinds = ["contig", "t", "slice", "offset"]
    calls = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(1200):
            M, N, K = (rng.choice([0, 1, 2, 3, 7, 8, 16, 17, 31, 64]) for _ in range(3))
            layout, dtype = rng.choice(["nn", "nt"]), rng.choice(dtypes)
            lead = rng.choice([(), (2,), (1, 3)])
            a = _operand((M, K), dtype, rng.choice(kinds), rng)
            if lead:
                a = a.expand(*lead, M, K)          # stride-0 leading dimensions
            b = _operand((K, N) if layout == "nn" else (N, K), dtype, rng.choice(kinds), rng)
            use_out = rng.random() < 0.3
            out = torch.empty(*lead, M, N, dtype=dtype) if use_out else None
            c = cudal2.matmul(a, b, layout=layout, out=out)
            assert c.shape == (*lead, M, N) and c.dtype == dtype
            if use_out:
                assert c is out
            assert close(c, a, b, layout), (M, N, K, layout, dtype, lead)
            calls += 1
    assert calls >= 1000


class _StandIn:
    """A kernel stand-in with the backend contract: refuses non-contiguous or misaligned operands
    (a real kernel would read garbage) and writes C = A @ B for its layout."""

    def __init__(self, layout):
        self.layout, self.calls = layout, 0

    def __call__(self, a, b, c, stream=None):
        for t in (a, b, c):
            assert t.is_contiguous() and t.data_ptr() % 16 == 0
        self.calls += 1
        bb = b if self.layout == "nn" else b.t()
        c.copy_((a.float() @ bb.float()).half())


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_kernel_plan_copies_and_writes_safely(layout):
    M, N, K = 6, 10, 12
    k = _StandIn(layout)
    plan = plans.KernelPlan(k, M, N, K, torch.Size((2, 3, N)), torch.device("cpu"), "stand-in")
    a = torch.randn(2 * 3 * K + 1).half()[1:].view(2, 3, K)          # misaligned base (2 bytes)
    b = _operand((K, N) if layout == "nn" else (N, K), torch.float16, "t", None)   # non-contiguous
    c = plan(a, b, None)
    assert c.shape == (2, 3, N) and close(c.reshape(M, N), a.reshape(M, K), b, layout)
    out = torch.empty(2, 3, 2 * N).half()[:, :, ::2]                  # a non-dense out view
    r = plan(a, b, out)
    assert r is out and torch.equal(out.reshape(M, N), c.reshape(M, N))
    with pytest.raises(ValueError, match="out is"):
        plan(a, b, torch.empty(M, N).half())
    assert k.calls == 2


def test_kernel_plan_out_aliasing_input():
    M = N = K = 8
    k = _StandIn("nn")
    plan = plans.KernelPlan(k, M, N, K, torch.Size((M, N)), torch.device("cpu"), "stand-in")
    a, b = torch.randn(M, K).half(), torch.eye(K).half() * 2
    want = a.float() * 2
    plan(a, b, a)                           # out is a: computed into a temporary, then copied
    assert torch.equal(a.float(), want)


class _BindStandIn(_StandIn):
    """A stand-in that also offers `bind(M, N, K)` (backends/base.py): the bound launch gets dense,
    aligned tensors of any shape holding A [M, K], B and C [M, N] and must not be given others."""

    def __init__(self, layout):
        super().__init__(layout)
        self.bound, self.targets = [], []

    def bind(self, M, N, K):
        self.bound.append((M, N, K))

        def launch(a, b, c):
            for t, n in ((a, M * K), (b, N * K), (c, M * N)):
                assert t.is_contiguous() and t.data_ptr() % 16 == 0 and t.numel() == n and t.dtype == torch.float16
            self.calls += 1
            self.targets.append(c)
            bb = b if self.layout == "nn" else b.t()
            c.view(M, N).copy_((a.reshape(M, K).float() @ bb.float()).half())
        return launch


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_bound_plan_copies_and_writes_safely(layout):
    M, N, K = 6, 10, 12
    k = _BindStandIn(layout)
    plan = plans.kernel_plan(k, M, N, K, torch.Size((2, 3, N)), torch.device("cpu"), "stand-in")
    assert type(plan) is plans.BoundPlan and k.bound == [(M, N, K)]
    a = torch.randn(2 * 3 * K + 1).half()[1:].view(2, 3, K)          # misaligned base (2 bytes)
    b = _operand((K, N) if layout == "nn" else (N, K), torch.float16, "t", None)   # non-contiguous
    c = plan(a, b, None)
    assert c.shape == (2, 3, N) and c.is_contiguous() and close(c.reshape(M, N), a.reshape(M, K), b, layout)
    assert k.targets[-1] is c                                          # allocated in its final shape
    ae = torch.randn(1, 3, K).half().expand(2, 3, K)                   # stride-0 leading dimension
    ce = plan(ae, b, None)
    assert close(ce.reshape(M, N), ae.reshape(M, K), b, layout)
    out = torch.empty(2, 3, 2 * N).half()[:, :, ::2]                  # a non-dense out view
    r = plan(a, b, out)
    assert r is out and torch.equal(out, c) and k.targets[-1] is not out
    dense = torch.full((2, 3, N), float("nan")).half()
    r = plan(a, b, dense)
    assert r is dense and torch.equal(dense, c) and k.targets[-1] is dense     # written in place
    with pytest.raises(ValueError, match="out is"):
        plan(a, b, torch.empty(M, N).half())
    with pytest.raises(ValueError, match="out is"):
        plan(a, b, torch.empty(2, 3, N))                               # float32
    with pytest.raises(TypeError, match="out must be a tensor"):
        plan(a, b, [[0.0]])


class _Sub(torch.Tensor):
    pass


def test_bound_plan_out_overlap_and_subclass():
    M = N = K = 8
    k = _BindStandIn("nn")
    plan = plans.kernel_plan(k, M, N, K, torch.Size((M, N)), torch.device("cpu"), "stand-in")
    a, b = torch.randn(M, K).half(), torch.eye(K).half() * 2
    want = a.float() * 2
    plan(a, b, a)                           # out is a: computed into a temporary, then copied
    assert torch.equal(a.float(), want) and k.targets[-1] is not a
    buf = torch.randn(3 * M * K).half()     # out and a in one storage: overlapping bytes -> temp,
    a1, o1 = buf[:M * K].view(M, K), buf[M * K // 2:M * K // 2 + M * N].view(M, N)
    assert o1.data_ptr() % 16 == 0
    want = a1.float() @ b.float()
    plan(a1, b, o1)
    assert torch.equal(o1.float(), want.half().float()) and k.targets[-1] is not o1
    o2 = buf[2 * M * K:].view(M, N)         # disjoint bytes of the same storage -> written in place
    a1 = buf[:M * K].view(M, K)
    plan(a1, b, o2)
    assert k.targets[-1] is o2 and torch.equal(o2.float(), (a1.float() @ b.float()).half().float())
    sub = torch.empty(M, N).half().as_subclass(_Sub)          # a tensor subclass that fits is served
    r = plan(a, b, sub)
    assert r is sub and torch.equal(torch.Tensor(sub).float(), (a.float() @ b.float()).half().float())


def test_plan_choice_follows_the_kernel():
    shape = torch.Size((4, 4))
    assert type(plans.kernel_plan(_StandIn("nn"), 4, 4, 4, shape, torch.device("cpu"), "")) is plans.KernelPlan
    assert type(plans.kernel_plan(_BindStandIn("nn"), 4, 4, 4, shape, torch.device("cpu"), "")) is plans.BoundPlan


def test_dispatch_refuses_tampered_entry_and_falls_back(tmp_path, hopper):
    reg = Registry.load(tmp_path)
    spec = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
    e = reg.add(Entry(problem="128x128x128:nn", device=DEV, backend="triton", spec=spec,
                      time_us=1.0, best_cublas_us=2.0), "# kernel\n")
    reg.add(Entry(problem="128x128x256:nn", device=DEV, backend="cublas", time_us=2.0, best_cublas_us=2.0), None)
    (tmp_path / e.source).write_text("# kernel, edited\n")
    ops.set_registry(tmp_path)
    # A card-like DeviceInfo (its key is h200-sm90); no rule reads sm_count, it only marks a card.
    dev = dataclasses.replace(hopper, name="NVIDIA H200", sm_count=1)
    assert dev.key == DEV
    with pytest.warns(RuntimeWarning, match=f"refusing entry {DEV}/128x128x128:nn.*edited or corrupt"):
        kern, info = ops._choose(Problem(128, 128, 128), dev, 0, strict=False)
    # No neighbour serves (128x128x256's entry is no evidence at 128): cuBLAS through torch.matmul.
    assert kern is None and info.startswith(f"torch: entry {DEV}/128x128x128:nn refused (")
    from cudal2.registry import RegistryError
    ops.clear_cache()
    with pytest.raises(RegistryError, match="refusing entry"):
        ops._choose(Problem(128, 128, 128), dev, 0, strict=True)
    (tmp_path / e.source).unlink()
    ops.clear_cache()
    with pytest.warns(RuntimeWarning, match="missing"):
        kern, info = ops._choose(Problem(128, 128, 128), dev, 0, strict=False)
    assert kern is None and info.startswith(f"torch: entry {DEV}/128x128x128:nn refused (")


def test_unreadable_registry_warns(tmp_path):
    (tmp_path / "index.json").write_text("garbage")
    with pytest.warns(RuntimeWarning, match="not valid JSON.*falls back"):
        assert ops.set_registry(tmp_path) is None
    ops.set_registry(None)


def test_compile_fullgraph_and_op():
    a, b = torch.randn(2, 9, 12), torch.randn(7, 12)
    f = torch.compile(lambda x, w: cudal2.matmul(x, w, layout="nt") * 2, fullgraph=True, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = f(a, b)
        torch.library.opcheck(torch.ops.cudal2.hgemm.default, (torch.randn(3, 5), torch.randn(5, 4), "nn"))
        torch.library.opcheck(torch.ops.cudal2.hgemm.default,
                              (torch.randn(2, 3, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True), "nt"))
    assert close(y / 2, a, b, "nt")


def test_import_is_light():
    import subprocess
    import sys
    code = "import sys, cudal2; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


_INTERP_SCRIPT = r'''
import sys, warnings, dataclasses, torch
from cudal2 import ops, plans
from cudal2.backends import get_backend
from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry, record_scope
from cudal2.spec import default_spec
root = sys.argv[1]
dev = dataclasses.replace(DeviceInfo.target("sm_90a"), name="NVIDIA H200", sm_count=1)
p = Problem(64, 64, 64, "nt")
spec = default_spec("tiled", p, dev)
reg = Registry.load(root)
e = reg.add(Entry(problem=p.text, device=dev.key, backend="triton", spec=spec.text),
            get_backend("triton").render(spec, p))
res = reg.verify(gpu=False, render=True)           # hash + spec + the backend re-renders it
assert [r.ok for r in res] == [True] and "render ok" in res[0].reason, res
ops.set_registry(root)
q = Problem(40, 48, 64, "nt")                       # off the tile grid, no entry, no scope: cuBLAS
kern, info = ops._choose(q, dev, 0, strict=False)
assert kern is None and info.startswith("torch: no registry entry for 40x48x64:nt"), info
# Measured at the corners of M 40..64 x N 48..64 (times made up: the rule is under test here, not
# the clock), the kernel serves the odd shape inside that box.
pts = [{"problem": f"{m}x{n}x64:nt", "status": "ok", "spec": spec.text, "time_us": 1.0, "best_cublas_us": 1.5}
       for m, n in ((40, 48), (40, 64), (64, 48))]
reg.add(dataclasses.replace(e, time_us=1.0, best_cublas_us=1.5), get_backend("triton").render(spec, p))
record_scope(root, p, dev.key, pts, {"M": (40, 64), "N": (48, 64)})
ops.set_registry(root)
kern, info = ops._choose(q, dev, 0, strict=False)
assert kern is not None and "(in its measured scope M 40..64 N 48..64, triton" in info, info
plan = plans.KernelPlan(kern, q.M, q.N, q.K, torch.Size((q.M, q.N)), torch.device("cpu"), info)
g = torch.Generator().manual_seed(0)
a = torch.randn(q.M, q.K, generator=g).half()
b = torch.randn(q.N, q.K, generator=g).half()
c = plan(a, b, None)
ref = a.float() @ b.float().t()
err = (torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref)).item()
assert err <= 5e-3, err
# An edit to the stored source must be refused, even though the spec itself is fine.
path = reg.source_path(e)
path.write_text(path.read_text() + "\n# edited\n")
ops.clear_cache()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    kern, info = ops._choose(q, dev, 0, strict=False)
assert kern is None and any(e.key in str(x.message) for x in w), info
assert [r.ok for r in reg.verify(gpu=False)] == [False]
print("OK", err)
'''


def test_registry_kernel_under_triton_interpreter(tmp_path):
    """The whole kernel route on the CPU: stored source -> hash check -> render check -> build ->
    plan -> masked launch of a real Triton kernel (interpreter), then refusal after an edit.
    A subprocess, because the interpreter is chosen when Triton is first imported."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", _INTERP_SCRIPT, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr[-3000:]
