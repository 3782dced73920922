"""`cudal2 generate --lead-specs FILE` (rl/leads.py): the file's grammar and errors, which leads a
shape keeps, and end to end on the replay clock: a shape's lead is its first evaluation and counts
toward the seed list's N, so the budget is unchanged."""
import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.rl.leads import LeadError, read_leads, valid_leads, with_leads
from cudal2.spec import KernelSpec, is_valid
from cudal2.store import Store

from test_rl_generate import SHAPES, _invoke, replay_store  # noqa: F401  (the fixture)

HOPPER = DeviceInfo.target("sm_90a")
WG = "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=4 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
TILED = "backend=triton family=tiled bm=64 bn=64 bk=32 warps=4 stages=3 group_m=8 split_k=1 subtile=1 warp_spec=0 cluster=1"


def test_read_leads_keeps_file_order_per_shape_and_drops_repeats(tmp_path):
    f = tmp_path / "leads.txt"
    f.write_text(f"# a comment\n256x64x256:nt|{WG}\n\n256x64x256:nt|{TILED}  # why\n256x64x256:nt|{WG}\n"
                 f"64x128x512|{TILED}\n")
    got = read_leads(f)
    assert list(got) == ["256x64x256:nt", "64x128x512:nn"]       # no layout: nn, as --shapes reads it
    assert [s.text for s in got["256x64x256:nt"]] == [KernelSpec.parse(WG).text, KernelSpec.parse(TILED).text]


@pytest.mark.parametrize("line,msg", [("256x64x256:nt " + WG, "expected 'MxNxK:layout|spec'"),
                                      ("256x64:nt|" + WG, ":1: "), ("256x64x256:nt|backend=cuda family=nope", ":1: ")])
def test_malformed_lines_name_the_file_and_line(tmp_path, line, msg):
    f = tmp_path / "leads.txt"
    f.write_text(line + "\n")
    with pytest.raises(LeadError, match=msg):
        read_leads(f)
    with pytest.raises(LeadError, match="no.such"):
        read_leads(tmp_path / "no.such")


def test_valid_leads_drops_what_the_shape_or_the_backends_refuse():
    p = Problem(256, 64, 256, "nt")
    deep_split = KernelSpec.parse(WG.replace("split_k=1", "split_k=16"))    # 16 slices of 4 K-tiles
    assert not is_valid(deep_split, p, HOPPER) and is_valid(KernelSpec.parse(WG), p, HOPPER)
    leads = {p.text: [deep_split, KernelSpec.parse(WG), KernelSpec.parse(TILED)]}
    assert valid_leads(leads, p, HOPPER) == ([KernelSpec.parse(WG), KernelSpec.parse(TILED)], 1)
    assert valid_leads(leads, p, HOPPER, ("cuda",)) == ([KernelSpec.parse(WG)], 2)
    assert valid_leads(leads, Problem(256, 64, 256, "nn"), HOPPER) == ([], 0)     # another layout: none


def test_with_leads_fills_the_seed_list_to_n():
    a, b, c, d = (KernelSpec.parse(WG.replace("stages=4", f"stages={s}")) for s in (3, 4, 5, 6))
    assert with_leads([c], [a, b, c, d], 3) == [c, a, b]
    assert with_leads([c, d], [a], 1) == [c, d]           # leads beyond N are all evaluated
    assert with_leads([], [a, b], 2) == [a, b]


def test_generate_evaluates_a_shapes_lead_first(replay_store, tmp_path):  # noqa: F811
    p = SHAPES[2]                                        # 256x64x256:nn
    with Store(replay_store) as src:
        measured = [m for m in src.measurements(problem=p.text) if m.status == "ok"]
    lead = max(measured, key=lambda m: m.time_us).spec   # the slowest: no seed list would pick it first
    bad = KernelSpec.parse(WG.replace("split_k=1", "split_k=16")).text
    f = tmp_path / "leads.txt"
    f.write_text(f"{p.text}|{bad}\n{p.text}|{lead}\n9999x1x1:nn|{WG}\n")
    r = _invoke("--replay", replay_store, "--shapes", p.shape, "--budget", 6, "--group", 2, "--seed-list", "fixed:4",
                "--lead-specs", f, "--store", tmp_path / "run.db", "--registry", tmp_path / "reg")
    assert r.returncode == 0, r.stderr
    with Store(tmp_path / "run.db") as st:
        ms = st.measurements(problem=p.text)
    specs = list(dict.fromkeys(m.spec for m in ms))
    assert specs[0] == lead and len(specs) == 6          # first, and within the budget
    assert "1 of the 1 shapes to search have lead specs" in r.stderr
    assert "1 lead specs dropped" in r.stderr


def test_generate_refuses_a_malformed_lead_file(replay_store, tmp_path):  # noqa: F811
    f = tmp_path / "leads.txt"
    f.write_text("64x64x64 nope\n")
    r = _invoke("--replay", replay_store, "--shapes", "64x64x64", "--lead-specs", f, "--store", tmp_path / "s.db")
    assert r.returncode == 2 and "leads.txt:1: expected" in r.stderr and len(r.stderr.strip().splitlines()) == 1
