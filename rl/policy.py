"""The default policy: a tiny transformer, trained from scratch, that writes a KernelSpec token by token.

Input sequence: [context embedding, tok_0, ..., tok_{i-1}] -> logits for field FIELDS[i]. The
context embedding is a small MLP over rl.features.context_vector (problem + device), fed through
`inputs_embeds` as the first position and added to every token's embedding, so one network serves
every shape and card. At each step the logits of tokens
whose values `cudal2.spec_mask.valid_values` rejects are -inf: sampling can never reach a dead end,
so every sample passes `validate` (the mask is exact, not a penalty learnt after the fact).

Every policy (this one, the uniform baseline, the HF-LM stand-in) speaks the same small interface:
  sample(problem, device, n, generator=, backends=, temperature=) -> list[Sample]
  token_logprobs(problem, device, samples) -> (logp [n,T], mask [n,T])  (trainable ones only)
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import torch
from torch import nn

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import FIELDS, KernelSpec
from cudal2.spec_mask import valid_values

from .features import N_FEATURES, context_vector
from .vocab import VOCAB, remap_vocab_tensors, rows_from

T = len(FIELDS)
_VALUE = {i: VOCAB.value(i) for ids in VOCAB.field_tokens.values() for i in ids}


@contextlib.contextmanager
def few_threads(device: torch.device | str = "cpu"):
    """One intra-op thread for the policy's work on a CPU: its matrices are 64 wide, and thread
    hand-off costs more than the arithmetic (measured 10x faster per forward on a busy 2-core box)."""
    if torch.device(device).type != "cpu":
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@dataclass
class Sample:
    """One proposal: the spec (None if an answer was rejected outright), the action tokens, the
    allowed token ids per step (the mask used), the per-token log-probs at sampling time, and for
    the HF policy the reason an answer was corrected or rejected."""
    spec: KernelSpec | None
    tokens: list[int]
    allowed: list[list[int]] = field(default_factory=list)
    old_logp: torch.Tensor | None = None
    reason: str = ""
    prompt: str = ""          # HF policy: the prompt it answered (the context of its log-probs)


@functools.lru_cache(maxsize=1 << 18)
def allowed_values(prefix: tuple, problem: Problem, device: DeviceInfo, backends: tuple | None) -> tuple:
    """Valid values of the next field after `prefix` (a tuple of values in FIELDS order).
    Cached: within a group every sample shares its first fields, and valid_values runs a DFS."""
    f = FIELDS[len(prefix)]
    vals = valid_values(dict(zip(FIELDS, prefix)), f, problem, device)
    if f == "backend" and backends:
        vals = [v for v in vals if v in backends]
        if not vals:
            raise ValueError(f"no valid spec of backend {'/'.join(backends)} for {problem} on {device.key}")
    return tuple(vals)


@functools.lru_cache(maxsize=1 << 18)
def _allowed_ids(prefix: tuple, problem: Problem, device: DeviceInfo, backends: tuple | None):
    """(token ids, additive mask row [V]) of allowed_values; cached, the sampler's inner loop."""
    f = FIELDS[len(prefix)]
    ids = [VOCAB.id(f, v) for v in allowed_values(prefix, problem, device, backends)]
    row = torch.full((len(VOCAB),), float("-inf"))
    row[ids] = 0.0
    return ids, row


def masked_sample(problem: Problem, device: DeviceInfo, n: int, logits_fn, *, generator=None,
                  backends: tuple | None = None, temperature: float = 1.0) -> list[Sample]:
    """Sample n specs field by field; logits_fn(tokens [n,i]) -> logits [n,V] for step i.
    `temperature`: a float, or a tensor [n] of one temperature per row (one batched call serves
    the search's cold and hot draws together)."""
    toks = torch.zeros((n, 0), dtype=torch.long)
    prefixes: list[tuple] = [() for _ in range(n)]
    allowed: list[list[list[int]]] = [[] for _ in range(n)]
    logps = torch.zeros((n, T))
    for i, f in enumerate(FIELDS):
        with torch.no_grad():
            logits = logits_fn(toks).float().cpu()
        rows = []
        for j in range(n):
            ids, row = _allowed_ids(prefixes[j], problem, device, backends)
            allowed[j].append(ids)
            rows.append(row)
        mask = torch.stack(rows)
        # Draw at `temperature` (the search heats up to escape known specs), but record the log-prob
        # under the policy itself (T = 1): that is the distribution GRPO's ratio is taken against.
        temp = temperature[:, None] if torch.is_tensor(temperature) else temperature
        draw = torch.softmax(logits / temp + mask, dim=-1)
        pick = torch.multinomial(draw, 1, generator=generator).squeeze(1)
        logps[:, i] = torch.log_softmax(logits + mask, dim=-1).gather(1, pick[:, None]).squeeze(1)
        toks = torch.cat([toks, pick[:, None]], dim=1)
        prefixes = [p + (_VALUE[int(t)],) for p, t in zip(prefixes, pick)]
    return [Sample(spec=KernelSpec(**dict(zip(FIELDS, prefixes[j]))), tokens=toks[j].tolist(),
                   allowed=allowed[j], old_logp=logps[j]) for j in range(n)]


def allowed_mask(samples: list[Sample]) -> torch.Tensor:
    """[n, T, V] additive mask (0 where allowed, -inf elsewhere) rebuilt from the samples."""
    m = torch.full((len(samples), T, len(VOCAB)), float("-inf"))
    for j, s in enumerate(samples):
        for i, ids in enumerate(s.allowed):
            m[j, i, ids] = 0.0
    return m


class SpecPolicy(nn.Module):
    """The default policy (GPT-2 blocks from transformers, a few tens of thousands of weights)."""

    trainable = True
    name = "default"
    row_temperatures = True     # sample() takes a tensor of per-row temperatures

    def __init__(self, d_model: int = 64, n_layer: int = 2, n_head: int = 4, seed: int = 0):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        self.hparams = {"d_model": d_model, "n_layer": n_layer, "n_head": n_head, "seed": seed}
        torch.manual_seed(seed)
        # Dropout off: GRPO's ratio must be exactly 1 on the first step after sampling.
        cfg = GPT2Config(vocab_size=len(VOCAB), n_positions=T + 1, n_embd=d_model, n_layer=n_layer,
                         n_head=n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         bos_token_id=VOCAB.bos, eos_token_id=VOCAB.pad, pad_token_id=VOCAB.pad)
        self.lm = GPT2LMHeadModel(cfg)
        self.ctx = nn.Sequential(nn.Linear(N_FEATURES, d_model), nn.GELU(), nn.Linear(d_model, d_model))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def logits(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """ctx [B,F], tokens [B,t] -> logits [B, t+1, V] (position i predicts field i)."""
        dev = self.device
        c = self.ctx(ctx.to(dev))[:, None, :]
        emb = [c]
        if tokens.shape[1]:
            # The context is also added to every spec token: a 2-layer model conditions on it far
            # sooner than through attention to one prefix position (the problem decides the tile).
            emb.append(self.lm.transformer.wte(tokens.to(dev)) + c)
        return self.lm(inputs_embeds=torch.cat(emb, dim=1)).logits

    def _ctx(self, problem, device, n):
        return torch.tensor([context_vector(problem, device)] * n, dtype=torch.float32)

    def sample(self, problem: Problem, device: DeviceInfo, n: int, *, generator=None,
               backends: tuple | None = None, temperature: float = 1.0) -> list[Sample]:
        ctx = self._ctx(problem, device, n)
        with few_threads(self.device):
            return masked_sample(problem, device, n, lambda toks: self.logits(ctx, toks)[:, -1],
                                 generator=generator, backends=backends, temperature=temperature)

    def token_logprobs(self, problem: Problem, device: DeviceInfo, samples: list[Sample]):
        """Per-token log-probs of the samples' tokens under the current weights (with grad), and a
        mask of the steps that were a choice (a field with one allowed value carries no decision)."""
        toks = torch.tensor([s.tokens for s in samples], dtype=torch.long)
        logits = self.logits(self._ctx(problem, device, len(samples)), toks[:, :-1]).float()
        mask = allowed_mask(samples).to(logits.device)
        logp = torch.log_softmax(logits + mask, dim=-1).gather(2, toks.to(logits.device)[..., None]).squeeze(2)
        choice = torch.tensor([[len(ids) > 1 for ids in s.allowed] for s in samples], device=logits.device)
        return logp, choice

    def spec_logprob(self, problem: Problem, device: DeviceInfo, spec: KernelSpec,
                     backends: tuple | None = None) -> float:
        """log P(spec | problem) under the masked policy (the quantity the GRPO test watches)."""
        vals = [getattr(spec, f) for f in FIELDS]
        allowed = [[VOCAB.id(f, v) for v in allowed_values(tuple(vals[:i]), problem, device, backends)]
                   for i, f in enumerate(FIELDS)]
        s = Sample(spec=spec, tokens=VOCAB.encode(spec), allowed=allowed)
        with torch.no_grad():
            logp, _ = self.token_logprobs(problem, device, [s])
        return float(logp.sum())

    def save(self, path) -> None:
        torch.save({"kind": "default", "hparams": self.hparams, "vocab": VOCAB.tokens,
                    "state": {k: v.detach().cpu() for k, v in self.state_dict().items()}}, path)

    @classmethod
    def load(cls, path) -> "SpecPolicy":
        """A saved policy. Saved under a smaller grammar (a choice added to cudal2.spec.CHOICES since,
        e.g. a new family), its token rows move to the new ids and the new tokens start from fresh
        initial weights; `remapped_from` then holds the old vocabulary (the trainer's state needs
        the same move). A grammar that lost a choice is refused."""
        ck = torch.load(path, map_location="cpu", weights_only=False)
        old = ck.get("vocab")
        if not old:
            raise ValueError(f"{path}: not a cudal2 policy checkpoint (no vocabulary)")
        p = cls(**ck["hparams"])
        state = ck["state"]
        p.remapped_from = None
        if old != VOCAB.tokens:
            try:
                rows = rows_from(old)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
            fresh = p.state_dict()
            state = remap_vocab_tensors(state, rows, len(old), p.hparams["d_model"], lambda k, v: fresh[k])
            p.remapped_from = list(old)
        p.load_state_dict(state)
        return p


class UniformPolicy:
    """Random-search baseline: uniform over the valid values of each field (same masks, no weights).
    Note: uniform per field, not per spec; that is what masked sampling with flat logits gives."""

    trainable = False
    name = "random"
    row_temperatures = True

    def sample(self, problem, device, n, *, generator=None, backends=None, temperature=1.0):
        return masked_sample(problem, device, n, lambda toks: torch.zeros((toks.shape[0], len(VOCAB))),
                             generator=generator, backends=backends)
