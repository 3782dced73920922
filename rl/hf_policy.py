"""`--policy hf:PATH`: any Hugging Face causal LM from a local directory stands in for the policy.

The model is prompted with the problem, the device and the spec grammar (every field and its
choices, the families of each backend, the main rules) and answers with one line of `key=value`
text. The answer is only ever parsed (KernelSpec.parse) and validated (cudal2.spec.validate),
never executed. An answer that does not parse, or parses but is invalid, is corrected field by
field with constrained decoding: walking FIELDS in order, the answer's own value is kept where the
masks allow it, and elsewhere the model's likeliest-by-sampling allowed value is taken (each
allowed `field=value` scored by the LM's log-prob of that text after the prompt and the prefix).
Sample.reason says why the raw answer was rejected and which fields were replaced.

GRPO trains it like the default policy: the action is the final answer text, its log-prob the sum
over its tokens (so corrections teach the model to answer validly in the first place).
"""
from __future__ import annotations

import torch
from torch import nn

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import CHOICES, FAMILIES, FIELDS, KernelSpec, SpecError, validate

from .policy import Sample, allowed_values, few_threads

MAX_NEW_TOKENS = 96


def grammar() -> str:
    lines = ["Fields, in this order, each as key=value:"]
    lines += [f"  {f}: {' | '.join(map(str, CHOICES[f]))}" for f in FIELDS]
    lines.append("Families: " + "; ".join(f"{b}: {', '.join(fs)}" for b, fs in FAMILIES.items()))
    lines.append("Rules: the family must belong to the backend; wgmma needs bm in 64|128|256, bk in 32|64|128, "
                 "warps 8|12; persistent and wgmma need N and K multiples of 8; the shared-memory ring "
                 "stages*(bm*bk+bk*bn)*2 bytes must fit the device; split_k at most the K tiles.")
    return "\n".join(lines)


def prompt(problem: Problem, device: DeviceInfo, backends: tuple | None = None) -> str:
    allowed = "/".join(backends) if backends else "triton/cuda"
    return (f"Write a half-precision GEMM kernel spec (fp16 in, fp32 accumulate, fp16 out).\n{grammar()}\n"
            f"Problem: M={problem.M} N={problem.N} K={problem.K} layout={problem.layout} backend {allowed}.\n"
            f"Device: {device.arch}, {device.smem_per_block // 1024} KB shared memory per block, "
            f"{device.sm_count or 'unknown'} SMs.\nSpec: ")


class HFPolicy(nn.Module):
    trainable = True
    name = "hf"

    def __init__(self, model, tokenizer, path: str = "", seed: int = 0):
        super().__init__()
        self.lm, self.tok, self.path, self.seed = model, tokenizer, str(path), seed
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token or self.tok.unk_token

    @classmethod
    def load(cls, path, seed: int = 0) -> "HFPolicy":
        from pathlib import Path

        from transformers import AutoModelForCausalLM, AutoTokenizer
        if not Path(path).is_dir():
            raise ValueError(f"--policy hf:{path}: not a local model directory (nothing is downloaded)")
        try:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"--policy hf:{path}: cannot load a causal LM there: {str(e).splitlines()[0]}") from None
        torch.manual_seed(seed)
        return cls(model, tok, path, seed)

    def save(self, path) -> None:
        self.lm.save_pretrained(str(path))
        self.tok.save_pretrained(str(path))

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    # ---- answering ----------------------------------------------------------------------------------
    def _generate(self, text: str, n: int, temperature: float, generator) -> list[str]:
        enc = self.tok(text, return_tensors="pt")
        ids, att = enc.input_ids.to(self.device), enc.attention_mask.to(self.device)
        if generator is not None:   # generate() draws from the global RNG: seed it from ours
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        with torch.no_grad():
            out = self.lm.generate(ids, attention_mask=att, do_sample=True, temperature=max(temperature, 1e-3), top_k=0,
                                   max_new_tokens=MAX_NEW_TOKENS, num_return_sequences=n,
                                   pad_token_id=self.tok.pad_token_id)
        return [self.tok.decode(o[ids.shape[1]:], skip_special_tokens=True).split("\n")[0].strip() for o in out]

    def _score(self, context: str, options: list[str]) -> torch.Tensor:
        """log P(option | context) for each option text, one batched forward."""
        ctx = self.tok(context).input_ids
        seqs = [ctx + self.tok(o, add_special_tokens=False).input_ids for o in options]
        L = max(map(len, seqs))
        ids = torch.full((len(seqs), L), self.tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], att[i, :len(s)] = torch.tensor(s), 1
        with torch.no_grad():
            logp = torch.log_softmax(self.lm(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).logits.float(), -1)
        out = []
        for i, s in enumerate(seqs):
            pos = torch.arange(len(ctx) - 1, len(s) - 1, device=logp.device)
            out.append(logp[i, pos, torch.tensor(s[len(ctx):], device=logp.device)].sum())
        return torch.stack(out).cpu()

    def correct(self, answer: str, problem: Problem, device: DeviceInfo, backends, temperature, generator,
                base: str) -> tuple[KernelSpec, list[str]]:
        """Constrained decoding seeded by the answer: keep its valid values, choose the rest."""
        try:
            wanted = {k: v for k, v in KernelSpec.parse(answer).to_dict().items()
                      if f"{k}=" in answer}
        except SpecError:
            wanted = {}
            for tok in answer.replace(",", " ").split():
                k, _, v = tok.partition("=")
                if k in CHOICES and v in map(str, CHOICES[k]):
                    wanted.setdefault(k, CHOICES[k][list(map(str, CHOICES[k])).index(v)])
        prefix, text, replaced = (), base, []
        for f in FIELDS:
            allowed = allowed_values(prefix, problem, device, tuple(backends) if backends else None)
            if f in wanted and wanted[f] in allowed:
                v = wanted[f]
            else:
                opts = [f"{f}={a}" for a in allowed]
                lead = "" if not prefix else " "
                scores = self._score(text, [lead + o for o in opts]) / max(temperature, 1e-3)
                v = allowed[int(torch.multinomial(torch.softmax(scores, 0), 1, generator=generator))]
                if f in wanted:
                    replaced.append(f"{f}={wanted[f]}->{v}")
                else:
                    replaced.append(f"{f}=?->{v}")
            text += ("" if not prefix else " ") + f"{f}={v}"
            prefix += (v,)
        return KernelSpec(**dict(zip(FIELDS, prefix))), replaced

    def sample(self, problem: Problem, device: DeviceInfo, n: int, *, generator=None,
               backends: tuple | None = None, temperature: float = 1.0) -> list[Sample]:
        base = prompt(problem, device, backends)
        out = []
        with few_threads(self.device):
            for answer in self._generate(base, n, temperature, generator):
                try:
                    spec = validate(KernelSpec.parse(answer), problem, device)
                    if backends and spec.backend not in backends:
                        raise SpecError("backend", f"backend={spec.backend} was not asked for ({'/'.join(backends)})")
                    reason = ""
                except SpecError as e:
                    spec, replaced = self.correct(answer, problem, device, backends, temperature, generator, base)
                    shown = answer if len(answer) <= 80 else answer[:77] + "..."
                    reason = (f"answer {shown!r} rejected ({e}); constrained decoding replaced "
                              f"{', '.join(replaced) or 'nothing'}")
                out.append(Sample(spec=spec, tokens=self.tok(spec.text, add_special_tokens=False).input_ids,
                                  reason=reason, prompt=base))
            with torch.no_grad():
                logp, _ = self.token_logprobs(problem, device, out)
        for s, lp in zip(out, logp.detach().cpu()):
            s.old_logp = lp[:len(s.tokens)]
        return out

    def token_logprobs(self, problem: Problem, device: DeviceInfo, samples: list[Sample]):
        """Per-token log-probs of each sample's answer text after its prompt, padded to the longest."""
        ctx = self.tok(samples[0].prompt or prompt(problem, device)).input_ids
        L = max(len(s.tokens) for s in samples)
        ids = torch.full((len(samples), len(ctx) + L), self.tok.pad_token_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        mask = torch.zeros((len(samples), L), dtype=torch.bool)
        for i, s in enumerate(samples):
            seq = ctx + s.tokens
            ids[i, :len(seq)], att[i, :len(seq)], mask[i, :len(s.tokens)] = torch.tensor(seq), 1, True
        logits = self.lm(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).logits.float()
        logp = torch.log_softmax(logits[:, len(ctx) - 1:-1], -1)
        tgt = ids[:, len(ctx):].to(logp.device)
        return logp.gather(2, tgt[..., None]).squeeze(2) * mask.to(logp.device), mask.to(logp.device)
