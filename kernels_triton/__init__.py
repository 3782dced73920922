"""Triton HGEMM families, one module each (`tiled`, `persistent`); the backend is cudal2.backends.triton.
`splitk_serial` (one-launch split-K) is not a family yet: bench/splitk_serial.py measures it first.

Every knob is a `tl.constexpr` of the family's kernel; each module exposes KNOBS (spec field ->
constexpr name), LAUNCH_OPTIONS, `launch(...)` and an fp32 `reference(...)`.
"""
