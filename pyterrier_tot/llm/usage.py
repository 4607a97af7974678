"""The counters of an :class:`~pyterrier_tot.llm.client.LLM` (``llm.usage``)."""
from __future__ import annotations

import dataclasses
from typing import Dict, Union


@dataclasses.dataclass
class LLMUsage:
    """Counters of one :class:`~pyterrier_tot.llm.client.LLM` (``llm.usage``; ``llm.reset_usage()`` zeroes them).

    ``requests``: answers asked for; ``calls``: HTTP requests actually sent (retries included);
    ``cache_hits``: answers served from the cache; ``retries``; ``failures``: requests given up on;
    ``truncated``: answers cut short by the token limit that the caller could not use (each retried);
    ``prompt_tokens`` / ``completion_tokens``: over every answer delivered, cached ones included (so per-query
    costs are comparable between a fresh and a cached run); ``seconds``: wall time inside ``chat``/``chat_many``.
    """
    requests: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    truncated: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> Dict[str, Union[int, float]]:
        return dataclasses.asdict(self)
