"""The package's layout rules (issue 17): no import cycles between cudal2's modules (lazy imports
count), no private name imported from another module, and the runtime never imports the stand-ins
of cudal2.testing. Read from the source with ast; nothing is imported."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = {"cudal2": ROOT / "src" / "cudal2", "cudal2.rl": ROOT / "rl",
         "cudal2.kernels_triton": ROOT / "kernels_triton", "cudal2.kernels_cuda": ROOT / "kernels_cuda"}


def _modules() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for pkg, d in TREES.items():
        for f in d.rglob("*.py"):
            rel = f.relative_to(d).with_suffix("")
            if "generated" in rel.parts:
                continue
            mods[".".join([pkg, *[p for p in rel.parts if p != "__init__"]])] = (f, f.name == "__init__.py")
    return mods


def _graph():
    """module -> modules of cudal2 it imports (anywhere in the file, outside `if TYPE_CHECKING`), and
    the private names imported across modules."""
    mods = _modules()
    edges, private = {}, []
    for name, (f, is_pkg) in mods.items():
        tree = ast.parse(f.read_text())
        skip = {id(n) for t in ast.walk(tree) if isinstance(t, ast.If) and "TYPE_CHECKING" in ast.unparse(t.test)
                for n in ast.walk(t)}
        out = edges.setdefault(name, set())
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            if isinstance(n, ast.ImportFrom):
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                if n.level:
                    base = base[:len(base) - (n.level - 1)]
                    target = ".".join(base + ([n.module] if n.module else []))
                else:
                    target = n.module or ""
                if not target.startswith("cudal2"):
                    continue
                for a in n.names:
                    if f"{target}.{a.name}" in mods:
                        out.add(f"{target}.{a.name}")
                        continue
                    out.add(target)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{name} imports {target}.{a.name}")
            elif isinstance(n, ast.Import):
                out.update(a.name for a in n.names if a.name.startswith("cudal2"))
    return {k: {e for e in v if e in mods and e != k} for k, v in edges.items()}, private


def _cycles(edges) -> list[list[str]]:
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    edges, _ = _graph()
    assert _cycles(edges) == []


def test_no_private_name_crosses_a_module():
    _, private = _graph()
    assert private == []


def test_the_runtime_never_imports_the_stand_ins():
    edges, _ = _graph()
    users = sorted(m for m, out in edges.items() if not m.startswith("cudal2.testing")
                   and any(e.startswith("cudal2.testing") for e in out))
    assert users == []
