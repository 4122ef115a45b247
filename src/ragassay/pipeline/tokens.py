"""The pipeline's token counter, ``regex-wordpunct-v1``, for chunk sizes and the packing budget.

It is defined in :mod:`ragassay.metrics.tokens` (the lowest layer that uses it: the token-level chunk
metrics count the same tokens, and so does the corpus check); the pipeline's modules name it here.
"""

from ragassay.metrics.tokens import TOKEN_COUNTER_NAME, count_tokens, token_spans

__all__ = ["TOKEN_COUNTER_NAME", "count_tokens", "token_spans"]
