"""Keeping a registry true to its backends: `verify` (re-hash every source, re-render its spec,
re-run the PROTOCOL checker on the entry's own card) and `rerender` (new sources for entries whose
backend renders their spec otherwise since filing). Registry.verify / Registry.rerender call these."""
from __future__ import annotations

from dataclasses import dataclass

from .disk import atomic_write, locked
from .evidence import unrunnable_record
from .entry import SUFFIX, Entry, RegistryError, sha256_text, target_for_key


@dataclass
class VerifyResult:
    entry: str
    ok: bool
    reason: str = ""
    checked: bool = False     # the GPU checker re-ran and passed on this entry's device


def check_render(entry: Entry, spec=None):
    """The entry's parsed KernelSpec, after checking that its backend still renders it to exactly
    the source the index records (by sha256); a backend changed since tuning fails closed."""
    if entry.backend == "cublas":
        raise RegistryError(f"{entry.key}: a cublas entry has no source to render")
    from ..backends import get_backend
    from ..spec import KernelSpec
    spec = KernelSpec.parse(entry.spec) if spec is None else spec
    if sha256_text(get_backend(entry.backend).render(spec, entry.prob)) != entry.sha256:
        raise RegistryError(f"{entry.key}: backend {entry.backend} no longer renders this spec to the "
                            "stored source (backend changed since it was tuned)")
    return spec


def rerender(reg, compare_sass: bool = True) -> list[Entry]:
    """Re-render every kernel entry whose backend no longer renders its spec to the stored source
    (a kernel family or backend edited since filing): write the new source, point the entry at
    it and mark its check as not yet re-run (`check.passed` None, `times.rerendered_from` the old
    sha256). One index write; returns the changed entries, which must pass `verify --gpu
    --render` on a card (and be re-timed) before they are shipped.
    With `compare_sass`, a CUDA or Triton entry whose new source compiles to the same SASS as the
    stored one (backends/sass.py; Triton: for the entry's problem, loaded by default) keeps its
    check and timings: they were measured on that machine code. It records `times.same_sass_as` (the old sha256) instead of a pending re-check.
    A source file no entry names any more is deleted: each template edit would otherwise leave
    one dead copy per re-rendered source (88 files, 2.9 MB on 2026-12-04) in a tree that travels
    to the card under a 64 MiB cap."""
    from ..backends import get_backend
    from ..spec import KernelSpec
    # (old sha, new sha, arch[, spec, layout, what Triton specialises on]) -> verdict: entries share
    # sources (926 -> 192)
    same_sass: dict = {}
    with locked(reg.root):
        fresh = type(reg).load(reg.root)     # under the lock: a concurrent writer's entries kept
        changed, old_paths = [], set()
        for e in fresh.all():
            if e.backend == "cublas":
                continue
            text = get_backend(e.backend).render(KernelSpec.parse(e.spec), e.prob)
            sha = sha256_text(text)
            if sha == e.sha256:
                continue
            old_paths.add(fresh.source_path(e))
            same = False
            if compare_sass and e.check.get("passed"):
                key = _code_key(e, sha)
                if key not in same_sass:
                    same_sass[key] = _same_code(e, fresh.read_source(e), text)
                same = same_sass[key]
            # Each keeps the first source it names: the one the check and timings were measured on
            # (a pending entry re-rendered again still names its filed source).
            if same:
                e.times = {**e.times, "same_sass_as": e.times.get("same_sass_as", e.sha256)}
            else:
                e.times = {**e.times, "rerendered_from": e.times.get("rerendered_from", e.sha256)}
                e.check = {**e.check, "passed": None, "reason": "re-rendered; re-check with verify --gpu --render"}
            e.sha256 = sha
            # the folder the source was in: a transferred entry keeps its source card's folder
            # (Registry.add_many), so re-rendering does not copy each transferred source under the
            # other card's key (2026-12-05: 121 files, 5.8 MB, into a tree capped at 64 MiB)
            folder = e.source.split("/")[2] if e.source else e.device
            e.source = f"kernels_{e.backend}/generated/{folder}/{sha[:16]}{SUFFIX[e.backend]}"
            e.validate()
            atomic_write(fresh.source_path(e), text)
            changed.append(e)
        if changed:
            atomic_write(reg.root / "index.json", fresh.to_json())
            named = {fresh.source_path(e) for e in fresh.all() if e.backend != "cublas"}
            for path in old_paths - named:
                path.unlink(missing_ok=True)
        reg.entries = fresh.entries
    return changed


def _code_key(e: Entry, new_sha: str) -> tuple:
    """What decides whether an entry's old and new texts compile alike: the two texts and the arch
    (CUDA); Triton also the spec, layout and what the JIT specialises the problem on."""
    key = (e.sha256, new_sha, target_for_key(e.device).arch)
    if e.backend == "triton":
        from ..backends.triton import spec_class
        key += (e.spec, e.prob.layout, spec_class(e.prob))
    return key


def _same_code(e: Entry, old: str, new: str) -> bool | None:
    """backends/sass.py's verdict on the entry's old and new texts (None: cannot tell)."""
    from ..backends.sass import same_machine_code, same_triton_machine_code
    from ..spec import KernelSpec
    dev = target_for_key(e.device)
    if e.backend == "cuda":
        return same_machine_code(old, new, dev.arch)
    return same_triton_machine_code(old, new, KernelSpec.parse(e.spec), e.prob, dev)


NOT_RUN = "checker not run (time limit)"


def verify(reg, gpu: bool | None = None, render: bool = False, pending_only: bool = False,
           time_limit: float | None = None, warm: bool = True) -> list[VerifyResult]:
    """Re-hash every entry's source and re-check its spec against its problem. `render`: also
    re-render the spec through its backend and compare hashes. `gpu` (None: if one is visible):
    also rebuild each kernel of the running device and re-run the PROTOCOL checker; `pending_only`:
    only the kernels whose check is pending (check.passed None, after `rerender`), the rest hashed
    and rendered as without a GPU (a card session's minutes go to what changed). `time_limit`
    (seconds): no checker run starts after it; those entries say NOT_RUN and stay as they were, so
    a call's time box ends with what passed recorded instead of killed with nothing (a re-check of
    741 pending H200 entries, 2026-12-06, may not fit one call). `warm`: the kernels to check are
    first compiled in parallel CPU processes (cudal2.evaluate.warm), so the checker's builds are
    disk-cache hits instead of one compile after another (the 741: 254 distinct sources, 185 wgmma)."""
    import time

    from ..spec import KernelSpec, violations
    t0 = time.monotonic()
    out = [VerifyResult(k, False, r) for k, r in reg.bad]
    dev_info = None
    if gpu is None or gpu:
        from ..device import current, gpu_available
        if gpu_available():
            dev_info = current()
        elif gpu:
            raise RegistryError("verify with the checker needs a CUDA GPU; none is visible")

    def to_check(e: Entry) -> bool:
        """The checker re-runs on this entry: a kernel of the running card, pending if pending_only."""
        return (dev_info is not None and e.backend != "cublas" and dev_info.key == e.device
                and not (pending_only and e.check.get("passed") is not None))

    if dev_info is not None and warm:
        from ..evaluate.warm import warm_compiles
        warm_compiles([(KernelSpec.parse(e.spec), e.prob) for e in reg.all() if to_check(e)], dev_info)
    for e in reg.all():
        try:
            if e.backend == "cublas":
                why = unrunnable_record(e)
                out.append(VerifyResult(e.key, why is None, f"{e.key}: {why}: cudal2 registry rechoose"
                                        if why else "cublas winner (no source)"))
                continue
            reg.read_source(e)
            spec = KernelSpec.parse(e.spec)
            bad = violations(spec, e.prob, target_for_key(e.device))
            if bad:
                raise RegistryError(f"{e.key}: spec invalid for its problem: {bad[0][0]}: {bad[0][1]}")
            note, checked = "hash ok", False
            if render or (dev_info is not None and dev_info.key == e.device):
                check_render(e, spec)     # read_source above proved text hashes to e.sha256
                note += ", render ok"
            if to_check(e) and time_limit is not None and time.monotonic() - t0 > time_limit:
                note += ", " + NOT_RUN
            elif to_check(e):
                from ..backends import build_kernel
                from ..check import check_kernel
                kern = build_kernel(spec, e.prob, dev_info)
                rep = check_kernel(kern, e.prob, "cuda")
                if not rep.passed:
                    raise RegistryError(f"{e.key}: checker failed: {rep.reason}")
                note, checked = note + ", checker passed", True
            out.append(VerifyResult(e.key, True, note, checked))
        except Exception as err:   # every failure is reported against its entry, never fatal
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            out.append(VerifyResult(e.key, False, msg if msg.startswith(e.key) else f"{e.key}: {msg}"))
    return out
