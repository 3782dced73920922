"""Stand-ins for tests and CPU dry runs: no GPU, no torch needed. The runtime never imports this package.

Owns: FakeEvaluator (fake_evaluator.py: the Evaluator's interface, times and faults from a clock).
May import: evaluate and what it imports.
"""
