"""The kernel registry: per device, the winning kernel of each problem, with its source and proof.

Owns: an entry and its rules (entry.py: Entry, RegistryError, the filing margin), the evidence
rules dispatch serves by (evidence.py: a cuBLAS entry's call, a kernel entry's measured scope),
the index on disk and its queries (index.py: Registry, load / lookup / nearest / add / export,
the shipped root; disk.py: atomic writes, the index's text, the writers' lock; upkeep.py: verify
and rerender), filing measurements into it (record.py: record_winner, record_cublas), a compare's
timings as evidence (timings.py: add_timings, server_guard, offline_guard, call_guard), and another card's
kernels filed on this card's compare (transfer.py: for_timing, file_winners), cuBLAS entries for
a card's shapes without one from its compares (fill.py: fill_cublas), two registries of the same
cards joined (merge.py: merge, decide), kernels filed and dispatched calls guarded from repeated
timings on the offline, CUDA-graph and server clocks (graph_rule.py: file_graph_winners,
dispatch_guard). This folder also
holds the shipped registry's data, index.json (its sources ship in cudal2.kernels_*/generated).
May import: problems, spec, device, backends and check (to verify); never evaluate, store, ops,
cli or rl. Inside: transfer / fill / merge / graph_rule -> record / timings -> index -> upkeep -> disk -> entry -> evidence,
one direction (upkeep re-loads a registry through the Registry object it is handed).
"""
from __future__ import annotations

from .entry import (BACKENDS, FORMAT, SUFFIX, VERSION, Entry, RegistryError, check_margin, sha256_text,
                    target_for_key)
from .index import ENV, Registry, default_root, log_distance, shipped_root
from .upkeep import VerifyResult, check_render
from .evidence import (CUBLAS_MARGIN, DISPATCH_TARGETS, cublas_choice, legacy_choice, qualified_calls,
                       scope_problems, unrunnable_calls, unrunnable_record)
from .record import lost_cold, record_cublas, record_scope, record_winner
from .timings import (add_timings, autotune_algos, call_guard, call_timings, compare_timings, offline_guard,
                      offline_kernel_timings, rechoose, server_guard, server_timings)

# Every public name, so `from cudal2.registry import X` keeps working for all callers.
__all__ = ["CUBLAS_MARGIN", "DISPATCH_TARGETS", "add_timings", "autotune_algos", "call_guard", "call_timings", "compare_timings",
           "cublas_choice", "lost_cold", "server_guard", "server_timings", "offline_guard", "offline_kernel_timings", "rechoose", "unrunnable_calls", "unrunnable_record",
           "legacy_choice", "record_scope", "scope_problems", "BACKENDS", "ENV", "FORMAT", "SUFFIX",
           "VERSION", "Entry", "Registry", "RegistryError", "VerifyResult", "check_margin", "check_render",
           "default_root", "log_distance", "record_cublas", "record_winner", "sha256_text", "shipped_root",
           "target_for_key"]
