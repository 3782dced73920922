"""`cudal2 check`: run the PROTOCOL checker on one spec (or a family's default) for one shape.

  cudal2 check --backend triton --shape 256x256x256 [--layout nt] [--spec TEXT|default]
               [--family tiled] [--interpret]
  cudal2 check --backend cuda --compile-only [--arch sm_90a] --shape MxNxK [--spec ...]

Prints one line per check (PASS/FAIL with the figure); exit status 0 only if all pass.
"""
from __future__ import annotations

import os
from typing import Optional

import typer


# Kernel size arguments and index arithmetic are 32-bit: no operand may reach 2^31 elements.
MAX_ELEMENTS = 2**31 - 1
# Triton's interpreter runs each tile's dot in numpy: the five checks took 11 s at 256x256x256 and
# 34 s at 1024x1024x16 (128x256x64 tiles, 2^24 and 2^26 multiply-adds over whole tiles; one CPU
# core, 2026-12-03). Above 2^26 a check would run minutes to hours (1000000000x1x1: 10 min, 2.2 GB,
# not finished), so it is refused.
INTERPRET_MAX_MACS = 2**26


def _size_refusal(problem) -> str | None:
    """Why no backend can run `problem` at all (32-bit sizes), or None."""
    p = problem
    for name, n in (("A", p.M * p.K), ("B", p.K * p.N), ("C", p.M * p.N)):
        if n > MAX_ELEMENTS:
            return (f"{p.shape}: {name} would have {n:.3g} elements; cudal2 kernels take at most 2^31-1 "
                    "per operand (32-bit sizes and offsets)")
    return None


def _interpret_refusal(problem, spec) -> str | None:
    """Why the interpreter would take too long on `problem` with `spec`'s tiles, or None."""
    p = problem
    macs = (-(-p.M // spec.bm) * spec.bm) * (-(-p.N // spec.bn) * spec.bn) * (-(-p.K // spec.bk) * spec.bk)
    if macs > INTERPRET_MAX_MACS:
        return (f"--interpret: {p.shape} is {macs:.3g} multiply-adds over this spec's {spec.bm}x{spec.bn}x{spec.bk} "
                f"tiles; the Triton interpreter is limited to 2^26 ({INTERPRET_MAX_MACS}, about 30 s on a CPU "
                "core): use a smaller shape, or a GPU")
    return None


def _memory_refusal(problem) -> str | None:
    """Why the checker's tensors would not fit in the GPU's free memory, or None. The checks hold
    A, B and C in fp16 with guard bands and a second copy, plus an fp32 reference of C."""
    import torch
    p = problem
    need = 2 * 2 * (p.M * p.K + p.K * p.N + p.M * p.N) + 2 * 4 * p.M * p.N
    free, _ = torch.cuda.mem_get_info()
    if need > free:
        return f"{p.shape}: the checks need about {need / 2**30:.1f} GiB of GPU memory; {free / 2**30:.1f} GiB is free"
    return None


def _resolve_spec(backend: str, family: Optional[str], spec_text: str, problem, device):
    from ..spec import FAMILIES, KernelSpec, SpecError, default_spec, validate
    if backend not in FAMILIES:
        raise SpecError("backend", f"{backend!r} is not a backend (choose from {tuple(FAMILIES)})")
    if spec_text == "default":
        fam = family or FAMILIES[backend][0]
        if fam not in FAMILIES[backend]:
            raise SpecError("family", f"{fam!r} is not a {backend} family (choose from {FAMILIES[backend]})")
        spec = default_spec(fam, problem, device)
    else:
        text = spec_text
        if "backend=" not in text:
            text = f"backend={backend} " + text
        if family and "family=" not in text:
            text = f"family={family} " + text
        spec = KernelSpec.parse(text)
        if spec.backend != backend:
            raise SpecError("backend", f"--spec says backend={spec.backend} but --backend is {backend}")
    return validate(spec, problem, device)


def check_cmd(
    shape: str = typer.Option(..., "--shape", help="MxNxK, e.g. 4096x4096x4096"),
    backend: str = typer.Option("triton", "--backend", help="triton or cuda"),
    layout: str = typer.Option("nn", "--layout", help="nn (B is [K,N]) or nt (B is [N,K])"),
    spec: str = typer.Option("default", "--spec", help="spec text (key=value ...) or 'default'"),
    family: Optional[str] = typer.Option(None, "--family", help="family for --spec default"),
    interpret: bool = typer.Option(False, "--interpret", help="Triton only: run under the CPU interpreter"),
    compile_only: bool = typer.Option(False, "--compile-only", help="compile and print resource usage; no GPU needed"),
    arch: str = typer.Option("sm_90a", "--arch", help="compile target when there is no GPU (or with --compile-only)"),
    edges: bool = typer.Option(True, "--edges/--no-edges", help="include the off-grid edge-shape check"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Check one kernel against the PROTOCOL checker (random, exact, poison, guard, fresh, edges)."""
    from .errors import fail
    from ..problems import Problem, ProblemError
    from ..spec import SpecError

    if backend not in ("triton", "cuda"):
        fail(f"--backend {backend!r}: choose triton or cuda")
    if interpret:
        if backend != "triton":
            fail("--interpret runs Triton kernels only; the CUDA backend needs a GPU (or --compile-only)")
        # Must be set before Triton decorates the kernels: the interpreter is chosen at import.
        os.environ["TRITON_INTERPRET"] = "1"
    from ..device import DeviceInfo, current, gpu_available

    try:
        problem = Problem.parse(shape, layout)
        too_big = _size_refusal(problem)
        if too_big:
            fail(too_big)
        if interpret or compile_only or not gpu_available():
            device = DeviceInfo.target(arch)
        else:
            device = current()
        kspec = _resolve_spec(backend, family, spec, problem, device)
    except (ProblemError, SpecError, ValueError) as e:
        fail(str(e))
        return

    if not (interpret or compile_only or gpu_available()):
        fail("no CUDA GPU here: use --interpret (Triton, small shapes on the CPU) or --compile-only", code=3)
    too_big = (_interpret_refusal(problem, kspec) if interpret
               else None if compile_only else _memory_refusal(problem))
    if too_big:
        fail(too_big)
    from ..backends import CompileError, get_backend
    be = get_backend(backend)
    if compile_only:
        try:
            art = be.compile(kspec, problem, device)
        except CompileError as e:
            fail(f"compile failed for {kspec.text}\n{e.log}" if e.log else str(e), code=1)
            return
        typer.echo(f"spec    {kspec.text}")
        typer.echo(f"arch    {art.meta.get('arch', device.arch)}")
        for k in ("kernel", "registers", "spills_bytes", "smem_static", "smem_dynamic", "stack_bytes", "cached"):
            if k in art.meta:
                typer.echo(f"{k:<7} {art.meta[k]}")
        return

    from ..check import check_kernel
    try:
        kernel = be.load(be.compile(kspec, problem, device))
    except CompileError as e:
        fail(f"compile failed: {str(e).splitlines()[0]}", code=1)
        return
    dev = "cpu" if interpret else "cuda"
    checks = ("random", "exact", "poison", "guard", "fresh") + (("edges",) if edges else ())
    sizes = (1, 17, 100) if interpret else (1, 17, 100, 1000, 3000)
    report = check_kernel(kernel, problem, dev, checks=checks, edge_sizes=sizes)
    if as_json:
        import json
        typer.echo(json.dumps({"spec": kspec.text, **report.to_dict()}, indent=2))
    else:
        typer.echo(f"spec    {kspec.text}")
        typer.echo(f"problem {problem}")
        for r in report.results:
            typer.echo(r.line())
    raise typer.Exit(0 if report.passed else 1)


def register(app) -> None:
    app.command("check")(check_cmd)
