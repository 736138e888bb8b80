"""Helpers over astr.v1 response messages."""

from __future__ import annotations

from typing import Sequence

from .v1 import generate_pb2 as pb


def sampling_mask_ids(mask: pb.SamplingMask, vocab_size: int) -> Sequence[int]:
    """The token ids of one SamplingMask, ascending: its token_ids, or every id of the vocabulary
    when it says nothing was removed (count == vocab_size, no ids; GetModelInfoResponse.vocab_size
    gives the size). A mask whose count disagrees with its ids raises ValueError."""
    if mask.count == vocab_size and not mask.token_ids:
        return range(vocab_size)
    if mask.count != len(mask.token_ids):
        raise ValueError(
            f"sampling mask of count {mask.count} holds {len(mask.token_ids)} ids "
            f"(vocabulary size {vocab_size})")
    return list(mask.token_ids)
