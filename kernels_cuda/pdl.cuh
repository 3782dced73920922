// cudal2 CUDA kernels: programmatic dependent launch for the mma and stream families (rendered after
// common.cuh; wgmma.cu has its own, with the trigger variants and its default).
// PDL (1 by default since 2026-12-06; 0 turns it off): programmatic dependent launch. Each entry
// point (PDL_WAIT() first) waits for the grids before it in the stream (griddepcontrol.wait:
// complete, their writes visible) and the launcher, seeing `cudal2_pdl`, launches it with programmatic stream serialization: its launch overlaps their tail where no event
// sits between calls (wgmma, H100 2026-12-06: 1.127x best-cublas over 115 filed kernels on the
// graph clock where it ran 1.078x without). There is no explicit trigger: dependents launch as
// this grid exits (wgmma's PDL=3). H100 2026-12-06 (run 129, bench/graph_clock.py): over the 27
// filed mma / stream kernels (small class, nn and nt) PDL=1 ran 1.369x best-cublas on the graph
// clock where the build without ran 1.191x (every one faster, 0.22-0.30 us a call), and 0.999x of
// it offline. sm_90+ only: on an older arch nothing changes.
#ifndef PDL
#define PDL 1
#endif
#if PDL && __CUDA_ARCH__ >= 900
__device__ int cudal2_pdl;      // tells the launcher to launch with programmatic stream serialization
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_WAIT() do { } while (0)
#endif
