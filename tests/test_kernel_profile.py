"""bench/kernel_profile.py's parsers, on text in the formats ncu and cuobjdump print (no GPU)."""
from bench_import import load_bench

kp = load_bench("kernel_profile")

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def _row(i, name, section, metric, value, grid="(1, 1, 8)"):
    return (f'"{i}","7","python3","h","{name}","1","7","(128, 1, 1)","{grid}","0","9.0",'
            f'"{section}","{metric}","","{value}"\n')


def test_ncu_details_parse_and_median_per_kernel():
    sol = "GPU Speed Of Light Throughput"
    text = ("==PROF== Connected to process 7\n" + HEAD
            + _row(0, "tiled_kernel", sol, "Duration", "6,400") + _row(0, "tiled_kernel", sol, "DRAM Throughput", "30.5")
            + _row(1, "splitk_reduce_kernel", sol, "Duration", "1,900", grid="(4, 1, 1)")
            + _row(2, "tiled_kernel", sol, "Duration", "6,000") + _row(2, "tiled_kernel", sol, "DRAM Throughput", "31.5")
            + _row(3, "tiled_kernel", sol, "Duration", "9,000")
            + _row(3, "tiled_kernel", "Launch Statistics", "Registers Per Thread", "168")
            + _row(3, "tiled_kernel", "Launch Statistics", "Cache Config", "CachePreferNone"))
    launches = kp.parse_ncu_csv(text)
    assert [k["id"] for k in launches] == [0, 1, 2, 3]
    assert launches[0]["metrics"][f"{sol}/Duration"] == 6400.0        # thousands separator dropped
    assert launches[3]["metrics"]["Launch Statistics/Cache Config"] == "CachePreferNone"
    rows = kp.summarise(launches)
    assert [r["kernel"] for r in rows] == ["tiled_kernel", "splitk_reduce_kernel"]   # first-launch order
    tiled, red = rows
    assert tiled["launches"] == 3 and tiled["duration_ns"] == 6400.0               # median of 6400, 6000, 9000
    assert tiled["dram_pct"] == 31.0 and tiled["registers"] == 168.0                 # median of what was reported
    assert red["grid"] == "(4, 1, 1)" and red["duration_ns"] == 1900.0 and red["sm_pct"] is None
    md = kp.markdown([{"shape": "64x64x8192", "kernel": "spec", "kernels": rows}],
                     {"device": "h200", "commit": "abc"})
    assert "| 64x64x8192 | spec | `tiled_kernel` | (1, 1, 8) | 168 |  | 6.40 | 31.0 |" in md


def test_ncu_output_without_a_table_is_no_launch():
    assert kp.parse_ncu_csv("==ERROR== the profiler failed\n") == []


def test_sass_opcodes_drop_predicates_and_modifiers():
    sass = """
        /*03e0*/               @P0 VIADD R3, R3, 0x1 ;                       /* 0x0000000103030836 */
        /*10d0*/                   LDGSTS.E.BYPASS.128 [R17], desc[UR16][R28.64], P3 ;
        /*1110*/                   LDGSTS.E.BYPASS.128 [R17+0x800], desc[UR16][R26.64], P3 ;
        /*1200*/              @!PT HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;
        /*1210*/                   HGMMA.64x64x16.F32 R24, gdesc[UR8], R24, gsb0 ;
        /*1220*/             @UP0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4], RZ ;
        /*1230*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
                                                                               /* 0x000fe20008000000 */
    """
    counts = kp.opcode_counts(sass)
    assert counts == {"LDGSTS": 2, "HGMMA": 2, "VIADD": 1, "SYNCS": 1, "BAR": 1}
    groups = kp.opcode_groups(counts)
    assert groups["wgmma"] == 2 and groups["cp_async"] == 2 and groups["mbarrier"] == 1
    assert groups["barrier"] == 1 and groups["tma_load"] == 0


def test_stall_reasons_largest_first():
    sec = "Command line profiler metrics"
    m = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    text = (HEAD + _row(0, "k", sec, m.format("long_scoreboard"), "2.5") + _row(0, "k", sec, m.format("barrier"), "0.5")
            + _row(0, "k", sec, m.format("wait"), "1.25") + _row(0, "k", sec, m.format("sleeping"), "0")
            + _row(1, "k", sec, m.format("long_scoreboard"), "3.5") + _row(1, "k", sec, m.format("barrier"), "0.5"))
    (row,) = kp.summarise(kp.parse_ncu_csv(text))
    assert list(row["stalls"]) == ["long_scoreboard", "wait", "barrier"]            # zero dropped
    assert row["stalls"]["long_scoreboard"] == 3.0                                  # median of 2.5, 3.5
    md = kp.markdown([{"shape": "s", "kernel": "spec", "kernels": [row]}], {"device": "h200", "commit": "abc"})
    assert "long_scoreboard 3.0, wait 1.25, barrier 0.5" in md
