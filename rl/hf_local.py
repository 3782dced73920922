"""A small causal LM for `--policy hf:PATH`, built from a config on this machine: nothing is
downloaded (the device machine reaches no hub).

The tokenizer is a byte-level BPE learnt from the policy's own prompts (cudal2.rl.hf_policy.prompt)
and every `field=value` of the spec grammar, so a spec answer is a handful of tokens; the model is a
GPT-2 of the given width and depth with random weights. It knows nothing of kernels at the start:
what the HF path shows with it is the plumbing (prompt, parse, constrained correction, GRPO update,
checkpoint and restore), and what GRPO teaches it within a search.

    python3 -c "from cudal2.rl.hf_local import build_grammar_lm; build_grammar_lm('/tmp/lm')"
"""
from __future__ import annotations

from pathlib import Path

import torch

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import CHOICES, FIELDS

from .hf_policy import prompt


def build_grammar_lm(path, *, n_embd: int = 32, n_layer: int = 1, n_head: int = 2, vocab_size: int = 400,
                     seed: int = 0) -> Path:
    """Write a GPT-2 (random weights, seeded) and its grammar-learnt tokenizer to `path`; returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    if n_embd % n_head:
        raise ValueError(f"n_embd {n_embd} must be a multiple of n_head {n_head}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    device = DeviceInfo.target("sm_90a")
    corpus = [prompt(Problem(m, n, k, lay), device) for m, n, k, lay in
              [(64, 128, 256, "nn"), (1000, 17, 3000, "nt")]]
    # Each field=value four times so BPE merges whole assignments into few tokens.
    corpus += [" ".join(f"{f}={v}" for f in FIELDS for v in CHOICES[f])] * 4
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<eos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=len(hf_tok), n_positions=1024, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        bos_token_id=hf_tok.eos_token_id, eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id))
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    return path
