"""Programmatic dependent launch in the tiled Triton family (kernels_triton/tiled.py's header), on a
machine without a GPU: compiled for sm_90 with PDL, the kernel waits (griddepcontrol.wait) before
any global load or store and its compiled metadata asks for the PDL launch; without PDL, neither.
The split-K reduce follows the tiled launch. pdl_supported: tiled on sm_90+, not the persistent
family, an older arch, or a stored text from before PDL; pdl_default: where supported, as a stored
text's footer says (PDL_LINE, written by render while PDL_BY_DEFAULT is on: on since run 131), so
`registry rerender` sees the default's flip as other machine code. The direct path launching
these kernels is tests/test_direct_launch.py's; on a card, tests/test_pdl_families_gpu.py.

The sm_90 compiles run in a child process with TRITON_INTERPRET unset (as test_triton_compile.py's).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudal2.backends import triton as tb
from cudal2.backends import triton_families as fam

HERE = Path(__file__).resolve()
SPECS = ["family=tiled bm=64 bn=64 bk=32 warps=4 stages=3 group_m=8",
         "family=tiled bm=32 bn=64 bk=64 warps=4 stages=2 split_k=3"]


def _order(ptx: str) -> dict:
    """Line numbers of the first wait, global load and global store (None: absent)."""
    lines = ptx.splitlines()
    first = lambda op: next((i for i, line in enumerate(lines) if op in line), None)  # noqa: E731
    return {"wait": first("griddepcontrol.wait"), "load": first("ld.global"), "store": first("st.global"),
            "cp": first("cp.async"), "waits": sum("griddepcontrol.wait" in line for line in lines)}


def _worker() -> None:
    import torch

    from cudal2.backends import triton as tb
    from cudal2.backends import triton_families as fam
    from cudal2.device import DeviceInfo
    from cudal2.kernels_triton import tiled
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    dev = DeviceInfo.target("sm_90a")
    for text in SPECS:
        spec = KernelSpec.parse(text)
        for layout in ("nn", "nt"):
            p = Problem(1000, 300, 777, layout)
            fn, args = tb._launch_args(spec, p)
            row = {"spec": text, "layout": layout, "supported": tb.pdl_supported(spec, dev),
                   "default": tb.pdl_default(spec, dev)}
            for pdl in (True, False):
                cex, opts = tb.constexprs(spec, layout, pdl)
                k = tb._aot(fn, args, tb._jit_kwargs(fn, cex, opts), 90)
                row[f"tiled_{pdl}"] = {**_order(k.asm["ptx"]), "launch_pdl": bool(k.metadata.launch_pdl)}
                if spec.split_k > 1:
                    red = tiled.splitk_reduce_kernel
                    r = tb._aot(red, [tb._Ptr(torch.float32), tb._Ptr(torch.float16), p.M, p.N, p.N, 1],
                                {**tiled.reduce_args(cex, opts), **tb._jit_kwargs(red, {}, {})}, 90)
                    row[f"reduce_{pdl}"] = {**_order(r.asm["ptx"]), "launch_pdl": bool(r.metadata.launch_pdl)}
            print(json.dumps(row), flush=True)
    # `registry rerender`'s comparison: a text from before PDL (the constexpr and the wait taken out,
    # no footer line) and today's rendering compile to the same SASS while the default is off (the
    # new text loads without PDL), to other SASS with it on (its footer asks for PDL; both launches
    # of a split-K spec compared). Each text loads as its footer says, whatever the default now.
    from cudal2.backends.sass import same_triton_machine_code
    was = fam.PDL_BY_DEFAULT
    for text in SPECS:
        spec = KernelSpec.parse(text)
        p = Problem(1000, 300, 777, "nt")
        row = {"sass_spec": text}
        for default in (False, True):
            fam.PDL_BY_DEFAULT = default
            new = tb.render(spec, p)
            old = new.replace(", PDL: tl.constexpr = False", "").replace(tb.PDL_LINE, "")
            old = old.replace("    if PDL:         # before any global access (the header: PDL)\n        gdc_wait()\n", "")
            old = old.replace("    if PDL:         # the slices the launch before it wrote\n        gdc_wait()\n", "")
            assert "if PDL" not in old.split(tb.FOOTER)[0].split("def reduce_args")[0], "the stand-in old text kept a wait"
            row[f"same_{default}"] = same_triton_machine_code(old, new, spec, p, dev)
            fam.PDL_BY_DEFAULT = not default      # the text decides, not the default at load
            row[f"text_pdl_{default}"] = [tb.pdl_default(spec, dev, source=new), tb.pdl_default(spec, dev, source=old)]
        fam.PDL_BY_DEFAULT = was
        print(json.dumps(row), flush=True)
    pers = KernelSpec.parse("family=persistent bm=128 bn=128 bk=64 warps=8 stages=3 subtile=2")
    old = DeviceInfo.target("sm_80")
    print(json.dumps({"persistent": tb.pdl_supported(pers, dev), "sm_80": tb.pdl_supported(KernelSpec.parse(SPECS[0]), old),
                      "footer_pdl": tb.text_pdl(tb.render(KernelSpec.parse(SPECS[0]), Problem(64, 64, 64))),
                      "persistent_footer_pdl": tb.text_pdl(tb.render(pers, Problem(64, 64, 64)))}),
          flush=True)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(HERE), "--worker"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_rerender_sees_the_default_flip_as_new_machine_code(rows):
    cmp = [r for r in rows if "sass_spec" in r]
    assert len(cmp) == len(SPECS)
    for r in cmp:
        assert r["same_False"] is True and r["same_True"] is False, r
        # rendered with the default off: neither text asks for PDL; on: only the new one
        assert r["text_pdl_False"] == [False, False] and r["text_pdl_True"] == [True, False], r


def test_tiled_waits_before_any_global_access_with_pdl(rows):
    kernels = [r for r in rows if "spec" in r]
    assert len(kernels) == 2 * len(SPECS)
    for r in kernels:
        assert r["supported"] is True and r["default"] is fam.PDL_BY_DEFAULT, r
        for name in ("tiled", "reduce") if "split_k=3" in r["spec"] else ("tiled",):
            on, off = r[f"{name}_True"], r[f"{name}_False"]
            assert on["launch_pdl"] and on["waits"] == 1, (r["spec"], name, on)
            accesses = [x for x in (on["load"], on["store"], on["cp"]) if x is not None]
            assert accesses and on["wait"] < min(accesses), (r["spec"], name, on)
            assert not off["launch_pdl"] and off["waits"] == 0, (r["spec"], name, off)


def test_pdl_not_supported_where_it_cannot_apply(rows):
    last = rows[-1]
    # persistent: TMA descriptors written to per-stream scratch (its text never asks for PDL);
    # sm_80: no griddepcontrol; a tiled text asks for PDL as the default stands.
    assert last == {"persistent": False, "sm_80": False, "footer_pdl": fam.PDL_BY_DEFAULT,
                    "persistent_footer_pdl": False}


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
