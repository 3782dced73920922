"""Group-relative policy optimisation (GRPO) for the spec policies.

Per problem a group of G samples with rewards r_1..r_G; advantage A_i = (r_i - mean) / (std + eps),
shared by every token of sample i. Loss per choice token (PPO-style clipped surrogate, plus a KL
penalty to the frozen starting policy by the k2 estimator q^2 / 2 with q = logp - logp_ref):
    -min(rho * A, clip(rho, 1-eps_clip, 1+eps_clip) * A) + beta * KL,   rho = exp(logp - logp_old)
A group whose rewards are all equal carries no signal (all A = 0) and only the KL term acts.
accelerate's Accelerator places the policy on whatever device there is (CPU, one GPU, ...).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .policy import few_threads


@dataclass
class GRPOConfig:
    lr: float = 3e-3
    clip: float = 0.2
    kl_coef: float = 0.05
    inner_steps: int = 2          # gradient steps per group on the same samples (the ratio clip guards them)
    eps: float = 1e-6
    max_grad_norm: float = 1.0
    cpu: bool = False             # keep the policy on the CPU even where a GPU is visible (the
                                  # efficiency study: bit-for-bit replay on resume, parent off CUDA)


def advantages(rewards: list[float], eps: float = 1e-6) -> torch.Tensor:
    r = torch.tensor(rewards, dtype=torch.float32)
    if len(r) < 2:
        return torch.zeros_like(r)
    return (r - r.mean()) / (r.std(unbiased=False) + eps)


def _accelerator(cpu: bool):
    """accelerate's Accelerator; with `cpu`, on the CPU unless this process has already put accelerate
    on a GPU (its state is process-wide and refuses to change), in which case that one is used."""
    from accelerate import Accelerator
    if cpu:
        try:
            return Accelerator(cpu=True)
        except ValueError:
            pass
    return Accelerator()


class GRPO:
    def __init__(self, policy, config: GRPOConfig | None = None, accelerator=None):
        self.cfg = config or GRPOConfig()
        self.acc = accelerator or _accelerator(self.cfg.cpu)
        self.policy = policy
        self.ref = copy.deepcopy(policy).eval()
        for p in self.ref.parameters():
            p.requires_grad_(False)
        opt = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=0.0)
        self.policy, self.opt = self.acc.prepare(policy, opt)
        self.ref.to(self.acc.device)
        self.steps = 0

    @property
    def module(self):
        return self.acc.unwrap_model(self.policy)

    def step(self, problem, device, samples, rewards: list[float]) -> dict:
        """One GRPO update on one group; returns loss statistics."""
        with few_threads(self.acc.device):
            return self._step(problem, device, samples, rewards)

    def _step(self, problem, device, samples, rewards: list[float]) -> dict:
        adv = advantages(rewards, self.cfg.eps).to(self.acc.device)
        if not samples or float(adv.abs().max()) == 0.0 and self.cfg.kl_coef == 0.0:
            return {"loss": 0.0, "kl": 0.0, "clipped": 0.0}
        pol = self.module
        with torch.no_grad():
            ref, _ = self.ref.token_logprobs(problem, device, samples)
        # Answers of the HF policy differ in length: pad the sampling-time log-probs like the rest.
        old = torch.zeros_like(ref)
        for j, s in enumerate(samples):
            old[j, :len(s.old_logp)] = s.old_logp.to(old.device)
        stats = {}
        for _ in range(self.cfg.inner_steps):
            logp, choice = pol.token_logprobs(problem, device, samples)
            w = choice.float()
            ratio = torch.exp(logp - old)
            a = adv[:, None]
            surr = torch.minimum(ratio * a, ratio.clamp(1 - self.cfg.clip, 1 + self.cfg.clip) * a)
            # k2, not k3 (exp(-q) + q - 1): the search draws hot samples the policy has already
            # pushed far below the reference, where k3's exponential gradient would push them back up.
            q = logp - ref
            kl = 0.5 * q * q
            per_tok = -surr + self.cfg.kl_coef * kl
            loss = (per_tok * w).sum() / w.sum().clamp(min=1.0)
            self.opt.zero_grad()
            self.acc.backward(loss)
            self.acc.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
            self.opt.step()
            clipped = ((ratio - 1).abs() > self.cfg.clip).float()
            stats = {"loss": float(loss.detach()), "kl": float((kl * w).detach().sum() / w.sum().clamp(min=1.0)),
                     "clipped": float((clipped * w).sum() / w.sum().clamp(min=1.0))}
        self.steps += 1
        return stats

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "steps": self.steps,
                "ref": {k: v.detach().cpu() for k, v in self.ref.state_dict().items()}}

    def load_state_dict(self, d: dict) -> None:
        self.opt.load_state_dict(d["opt"])
        self.steps = d["steps"]
        self.ref.load_state_dict(d["ref"])
