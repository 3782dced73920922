"""Triton HGEMM families, one module each (`tiled`, `persistent`); the backend is cudal2.backends.triton.
`splitk_serial` (one-launch split-K) is not a family: on the H200 it ran 0.94x of the tiled family's
two-launch split-K at the same knobs (bench/splitk_serial.py, 2026-12-03).

Every knob is a `tl.constexpr` of the family's kernel; each module exposes KNOBS (spec field ->
constexpr name), LAUNCH_OPTIONS, `launch(...)` and an fp32 `reference(...)`.
"""
