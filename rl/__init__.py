"""The policy that writes KernelSpecs, its GRPO update, the search loop and the replay environment.

  features   context features of a (problem, device)
  vocab      one token per `field=value` of cudal2.spec.CHOICES, plus special tokens
  policy     the default policy: a tiny transformer trained from scratch, masked field by field
  hf_policy  any Hugging Face causal LM from a local path, prompted with the spec grammar
  grpo       group-relative policy optimisation (clipped ratio, KL to the starting policy)
  reward     the reward of one Measurement (ARCHITECTURE.md)
  replay     an evaluator driven by stored measurements (CPU training and tests)
  search     the search loop and the random / fixed-list baselines
  shared_eval one evaluator shared by several methods, with per-method accounting
  staged     `cudal2 generate`'s per-shape search: seeds, groups, the screen and the full re-check
  costmodel  the learned cost model (log speedup from shape + spec features); costtrain: its rows,
             shape split, training and held-out figures; costrank: `--seed-list cost:N`'s pool and pick
  pretrain   the default policy trained offline on stored rows (reward-weighted likelihood)
(The search-efficiency study of issue 5 is bench/efficiency.py.)
May import: spec, problems, device, measurement (an evaluator and a store are handed in); never
registry, ops or cli, which sit above it.
"""
