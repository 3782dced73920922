"""The policy's vocabulary: one token per `field=value` of cudal2.spec.CHOICES, plus specials.

A spec is exactly len(FIELDS) tokens in FIELDS order (its canonical text split on spaces), so
token position i always carries field FIELDS[i]; the mask at step i is the set of that field's
tokens whose values `cudal2.spec_mask.valid_values` allows. The context (problem + device) is not
tokenised: it enters as one continuous embedding in front of the spec (see policy.py).
"""
from __future__ import annotations

import torch

from cudal2.spec import CHOICES, FIELDS, KernelSpec

SPECIALS = ("<pad>", "<bos>", "<ctx>")


class Vocab:
    def __init__(self) -> None:
        self.tokens: list[str] = list(SPECIALS)
        self.field_tokens: dict[str, list[int]] = {}
        for f in FIELDS:
            ids = []
            for v in CHOICES[f]:
                ids.append(len(self.tokens))
                self.tokens.append(f"{f}={v}")
            self.field_tokens[f] = ids
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad, self.bos, self.ctx = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, field: str, value) -> int:
        try:
            return self.index[f"{field}={value}"]
        except KeyError:
            raise KeyError(f"{field}={value!r} is not in the vocabulary (choices {CHOICES.get(field)})") from None

    def value(self, token_id: int):
        field, v = self.tokens[token_id].split("=", 1)
        return CHOICES[field][[str(c) for c in CHOICES[field]].index(v)]

    def encode(self, spec: KernelSpec) -> list[int]:
        return [self.index[t] for t in spec.tokens()]

    def decode(self, ids: list[int]) -> KernelSpec:
        if len(ids) != len(FIELDS):
            raise ValueError(f"a spec is {len(FIELDS)} tokens, got {len(ids)}")
        vals = {}
        for f, i in zip(FIELDS, ids):
            if i not in self.field_tokens[f]:
                raise ValueError(f"token {self.tokens[i]!r} at the position of field {f}")
            vals[f] = self.value(i)
        return KernelSpec(**vals)


VOCAB = Vocab()


# ---- checkpoints saved under an older grammar ---------------------------------------------------------
def rows_from(old_tokens: list[str], new_tokens: list[str] | None = None) -> list[int | None]:
    """For each token of the new vocabulary, its row in a tensor laid out by `old_tokens` (None: a
    token the old grammar did not have). The grammar may only grow: a choice that was removed would
    leave learned rows with no meaning, so that raises."""
    new_tokens = VOCAB.tokens if new_tokens is None else new_tokens
    gone = [t for t in old_tokens if t not in new_tokens]
    if gone:
        raise ValueError(f"the checkpoint's vocabulary has tokens the grammar no longer has ({', '.join(gone[:5])}); "
                         "train a new policy")
    where = {t: i for i, t in enumerate(old_tokens)}
    return [where.get(t) for t in new_tokens]


def remap_vocab_tensors(state: dict, rows: list[int | None], n_old: int, width: int, fill) -> dict:
    """`state` with every [n_old, width] tensor (the token embedding, the output head, their
    optimizer moments) re-laid out by `rows`; a new token's row comes from `fill(key, tensor)`, a
    tensor of the new shape (fresh initial weights for weights, zeros for moments). Nested dicts
    (an optimizer's state) are walked; other values pass through."""
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out[k] = remap_vocab_tensors(v, rows, n_old, width, fill)
        elif isinstance(v, torch.Tensor) and v.ndim == 2 and tuple(v.shape) == (n_old, width):
            new = fill(k, v).clone()
            for i, r in enumerate(rows):
                if r is not None:
                    new[i] = v[r]
            out[k] = new
        else:
            out[k] = v
    return out
