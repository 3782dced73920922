"""Adopt a device call's run pack (the run.tgz `bench/grid_search.sh` leaves under $OUT) into the repo.

    python3 bench/adopt_runpack.py PATH/run.tgz [--device h200-sm90] [--dry-run]

PATH/run.tgz may have come back in parts (run.tgz.part-aa, -ab, ...: grid_search.sh splits a pack
over 15 MB, since a file over 16 MiB does not come back from a device call): name the folder, the
missing run.tgz or any part, and the parts are read in order as one pack.

What it writes (the committed state `grid_search.sh` rebuilds run/ from on the next card):
  * the pack's registry, with the tree's entries merged in (cudal2.registry.merge: the tree may
    have filed since the pack's registry was exported, e.g. a transfer adopted between two calls
    on one warm card, 2026-12-06 runs 136-137; --replace: the pack's registry as it came), becomes
    the shipped one: src/cudal2/registry/index.json, and
    kernels_<backend>/generated/ holds exactly the sources its entries name, over every device (new
    ones copied, ones no entry names any more removed);
  * the stores and the policy checkpoints, gzipped (mtime 0, so an unchanged store is an unchanged
    file) into bench/results/<device>/grid_search/ under the names grid_search.sh reads;
  * cuBLASLt autotune's choices and the grid nn compare's resumable rows beside them.
Grid nt's and the model set's compare files are named by run (registry_v2/...); copy those by hand.
Afterwards: `cudal2 registry verify --render`, the entry counts in tests/test_shipped_registry.py
and README, `bench/registry_v2_table.py`. Each step was done by hand before (runs 59-72); this is
those steps in one place, so a merge under a session's clock does not miss one.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
from cudal2.registry.index import Registry  # noqa: E402
from cudal2.registry.merge import merge  # noqa: E402

# run/<name> -> the committed file it becomes (gzipped); grid_search.sh's recipe reads these names.
STORES = {"grid.db": "grid_store.db.gz", "grid_nn2.db": "grid_nn2_store.db.gz",
          "grid_nn_leads.db": "grid_nn_leads_store.db.gz", "models_decode.db": "models_decode_store.db.gz",
          "sweep_leads.db": "sweep_leads_store.db.gz",
          "compare/compare_grid.rows.jsonl": "compare_grid.rows.jsonl.gz"}
CHECKPOINTS = {"grid.db.ckpt": "grid_policy_ckpt.tgz", "grid_nn2.db.ckpt": "grid_nn2_policy_ckpt.tgz"}
PLAIN = ["compare/compare_grid.runs.json"]          # plus run/lt-autotune-*.json


def gzip_to(src: Path, dest: Path) -> None:
    with open(src, "rb") as f, open(dest, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        shutil.copyfileobj(f, out, 1 << 20)


def same_gz(src: Path, gz: Path) -> bool:
    """Whether the committed gzip already holds src's bytes (then it is left as it is)."""
    if not gz.is_file():
        return False
    with gzip.open(gz, "rb") as f:
        return f.read() == src.read_bytes()


def same_ckpt(run_parent: Path, name: str, tgz: Path) -> bool:
    """Whether the committed archive holds exactly the checkpoint directory's files."""
    if not tgz.is_file():
        return False
    ckpt = run_parent / "run" / name
    files = {f"run/{name}/{f.relative_to(ckpt).as_posix()}": f for f in ckpt.rglob("*") if f.is_file()}
    with tarfile.open(tgz) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        return members.keys() == files.keys() and all(
            tar.extractfile(m).read() == files[n].read_bytes() for n, m in members.items())


def tar_ckpt(run_parent: Path, name: str, dest: Path) -> None:
    # the archive's member paths are run/<name>/..., as `tar xzf` in the repo root expects
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(run_parent / "run" / name, arcname=f"run/{name}")


def sync_sources(reg: Registry, dry: bool, root: Path = REPO) -> list[str]:
    """kernels_<backend>/generated/<folder>/ := the files the pack's entries name, over every
    device: an entry may name a file under another device's folder (a transfer keeps the source
    card's content-addressed path, registry.transfer), so a file stays while any entry names it.
    Swept: the folders of every device with entries and of every named file."""
    log = []
    named: dict[Path, Path] = {}
    for e in reg.all():
        if e.source:                    # cuBLAS entries name no source
            reg.read_source(e)          # refuses a source whose hash is not the entry's
            named[root / e.source] = reg.source_path(e)
    dirs = {root / f"kernels_{b}" / "generated" / device for b in ("cuda", "triton") for device in reg.entries}
    dirs |= {f.parent for f in named}
    for d in sorted(dirs):
        for f in sorted(d.glob("*")) if d.is_dir() else []:
            if f.is_file() and f not in named:
                log.append(f"remove {f.relative_to(root)}")
                if not dry:
                    f.unlink()
    for dest, src in sorted(named.items()):
        if not dest.exists() or dest.read_bytes() != src.read_bytes():
            log.append(f"{'update' if dest.exists() else 'add'} {dest.relative_to(root)}")
            if not dry:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
    return log


def merge_tree(root: Path, pack_registry: Path, tmp: Path) -> str | None:
    """Join the tree's registry (root's index and kernels_*/generated) into the pack's, in place;
    returns merge's count line, None if the tree has no index yet or nothing of it was taken."""
    index = root / "src" / "cudal2" / "registry" / "index.json"
    if not index.is_file():
        return None
    tree = tmp / "tree-registry"        # the tree's registry laid out as an export: its sources by link
    tree.mkdir()
    shutil.copyfile(index, tree / "index.json")
    for b in ("cuda", "triton"):
        if (root / f"kernels_{b}").is_dir():
            (tree / f"kernels_{b}").symlink_to((root / f"kernels_{b}").resolve())
    res = merge(pack_registry, tree)
    if not (res.added or res.replaced):
        return None
    return (f"merge the tree's registry into the pack's: {len(res.added)} added, {len(res.replaced)} "
            f"replaced, {len(res.kept)} kept the pack's")


def pack_parts(path: Path) -> list[Path]:
    """The file(s) a pack is: PATH itself, or the run.tgz.part-* beside it (PATH a folder, a run.tgz
    that came back in parts, or one of the parts), in split's order. [] if there is neither."""
    if path.is_file() and ".part-" not in path.name:
        return [path]
    folder, stem = (path, "run.tgz") if path.is_dir() else (path.parent, path.name.split(".part-")[0])
    whole = folder / stem
    if path.is_dir() and whole.is_file():
        return [whole]
    return sorted(folder.glob(f"{stem}.part-*"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", type=Path, help="run.tgz from a device call (or its folder / one of its parts)")
    ap.add_argument("--device", default=None, help="the card's results folder (bench/results/<device>; default: "
                    "the card the pack's run/.card names, else h200-sm90, whose packs predate it)")
    ap.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    ap.add_argument("--root", type=Path, default=REPO, help="the repo to write into (default: this one)")
    ap.add_argument("--replace", action="store_true", help="the pack's registry replaces the tree's whole "
                    "(default: the tree's entries are merged into it first, by cudal2.registry.merge's rule)")
    args = ap.parse_args(argv)
    root = args.root
    parts = pack_parts(args.pack)
    if not parts:
        ap.error(f"{args.pack} is not a pack (no file, no run.tgz.part-* beside it)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        whole = parts[0]
        if len(parts) > 1:
            whole = tmp / "run.tgz"
            with open(whole, "wb") as f:
                for part in parts:
                    f.write(part.read_bytes())
        with tarfile.open(whole) as tar:
            tar.extractall(tmp, filter="data")
        run = tmp / "run"
        if not (run / "registry" / "index.json").is_file():
            print(f"{args.pack} holds no run/registry/index.json: not a grid_search.sh pack", file=sys.stderr)
            return 2
        # whose stores these are (grid_search.sh writes run/.card): an H100's must not land in the
        # H200's folder, where the next H200 call would go on from them
        card = (run / ".card").read_text().strip() if (run / ".card").is_file() else None
        if args.device and card and args.device != card:
            print(f"the pack holds {card}'s search state, not {args.device}'s", file=sys.stderr)
            return 2
        device = args.device or card or "h200-sm90"
        out_dir = root / "bench" / "results" / device / "grid_search"
        log_merge = None if args.replace else merge_tree(root, run / "registry", tmp)
        reg = Registry.load(run / "registry")
        if reg.bad:
            print(f"the pack's registry refuses {len(reg.bad)} entries: {reg.bad[:3]}", file=sys.stderr)
            return 2
        log = sync_sources(reg, args.dry_run, root)
        if log_merge:
            log.insert(0, log_merge)
        index = root / "src" / "cudal2" / "registry" / "index.json"
        text = reg.to_json()
        if not index.is_file() or index.read_text() != text:
            log.append(f"update {index.relative_to(root)} ({sum(len(v) for v in reg.entries.values())} entries)")
            if not args.dry_run:
                index.parent.mkdir(parents=True, exist_ok=True)
                index.write_text(text)
        if not args.dry_run:
            out_dir.mkdir(parents=True, exist_ok=True)
        for name, dest in STORES.items():
            # an empty file is a compare that timed nothing (sweep_file.sh's last step with its
            # time box spent, runs 134-139): no rows to keep, so none committed in place of rows
            if (run / name).is_file() and (run / name).stat().st_size == 0:
                continue
            if (run / name).is_file() and not same_gz(run / name, out_dir / dest):
                log.append(f"store run/{name} -> {(out_dir / dest).relative_to(root)}")
                if not args.dry_run:
                    gzip_to(run / name, out_dir / dest)
        for name, dest in CHECKPOINTS.items():
            if (run / name).is_dir() and not same_ckpt(tmp, name, out_dir / dest):
                log.append(f"checkpoint run/{name} -> {(out_dir / dest).relative_to(root)}")
                if not args.dry_run:
                    tar_ckpt(tmp, name, out_dir / dest)
        for src in [run / p for p in PLAIN] + sorted(run.glob("lt-autotune-*.json")):
            if src.is_file() and not ((out_dir / src.name).is_file()
                                      and (out_dir / src.name).read_bytes() == src.read_bytes()):
                log.append(f"copy {src.relative_to(tmp)} -> {(out_dir / src.name).relative_to(root)}")
                if not args.dry_run:
                    shutil.copyfile(src, out_dir / src.name)
    print("\n".join(log) if log else "nothing to change", flush=True)
    print("next: cudal2 registry verify --render; the counts in tests/test_shipped_registry.py and README;"
          " grid nt / model-set compare files by run under registry_v2/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
