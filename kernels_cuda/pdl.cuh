// cudal2 CUDA kernels: programmatic dependent launch for the mma and stream families (rendered after
// common.cuh; wgmma.cu has its own, with the trigger variants and its default).
// PDL (0 in every filed kernel; an experiment, as wgmma.cu's PDL was until 2026-12-06): programmatic
// dependent launch. Each entry point (PDL_WAIT() first) waits for the grids before it in the stream
// (griddepcontrol.wait: complete, their writes visible) and the launcher, seeing `cudal2_pdl`,
// launches it with programmatic stream serialization: its launch overlaps their tail where no event
// sits between calls (wgmma, H100 2026-12-06: 1.127x best-cublas over 115 filed kernels on the
// graph clock where it ran 1.078x without). sm_90+ only: on an older arch nothing changes.
#ifndef PDL
#define PDL 0
#endif
#if PDL && __CUDA_ARCH__ >= 900
__device__ int cudal2_pdl;      // tells the launcher to launch with programmatic stream serialization
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_WAIT() do { } while (0)
#endif
