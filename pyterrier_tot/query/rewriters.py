"""The paper's query-rewriting baselines, as PyTerrier query rewriters that keep the old query in ``query_0``.

- :class:`LLMQueryRewriter` (Q): the LLM rewrites the whole request as one short search query;
- :class:`HyDE` (H): the LLM writes a hypothetical catalogue description of the book, used as the query
  (``combine="append"`` keeps the original query in front of it);
- :class:`ClueConcatenator` (E / P): the clue columns of a decomposer (LLM or rules) joined into one query.

    rewrite = LLMQueryRewriter(llm) >> bm25
    concat = ClueDecomposer(llm, "predictive") >> ClueConcatenator() >> dense

A rewrite that fails (LLM error, empty answer) keeps the original query for that row, with a warning and a
count in ``.failures``: no query is ever lost or emptied.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import explain_columns, is_missing
from pyterrier_tot.checks import check_query_frame
from pyterrier_tot.decomposition.clue_decomposer import clean_answer
from pyterrier_tot.decomposition.clues import CLUE_FIELDS, clue_column
from pyterrier_tot.llm.templates import load_prompt


class _LLMRewriter(pt.Transformer):
    prompt_name = ""
    label = ""
    one_line = False

    @keyword_settings
    def __init__(self, llm, *, prompt: str = None, prompt_dir: Union[str, Path, None] = None,
                 max_query_chars: int = 6000):
        self.llm = llm
        self.prompt_dir = prompt_dir
        self.prompt = load_prompt(prompt or self.prompt_name, prompt_dir)
        self.max_query_chars = int(max_query_chars)
        self.failures = 0

    def _combine(self, original: str, generated: str) -> str:
        return generated

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        out = pt.model.push_queries(inp.copy(), keep_original=True, inplace=False)
        if len(inp) == 0:
            return out
        check_query_frame(inp, repr(self))
        originals = out["query_0"].astype(str).tolist()
        answers = self.llm.chat_many([self.prompt.messages(q[: self.max_query_chars]) for q in originals],
                                     prompt_version=self.prompt.version, desc=self.label)
        new, failed = [], 0
        for q, a in zip(originals, answers):
            text = clean_answer(a, one_line=self.one_line)
            if text is None:
                failed += 1
                new.append(q)
            else:
                new.append(self._combine(q, " ".join(text.split())))
        if failed:
            self.failures += failed
            warnings.warn(f"{self!r}: {failed} of {len(originals)} rewrite(s) failed or came back empty; "
                          "those rows keep their original query", stacklevel=2)
        out["query"] = new
        return out

    def _settings(self) -> dict:
        # the prompt always shown (it says what the LLM is asked), the other settings where not the default
        return {"prompt": self.prompt.name, "prompt_dir": self.prompt_dir, "max_query_chars": self.max_query_chars}

    def settings(self) -> dict:
        """What changes its queries (:mod:`pyterrier_tot._plumbing.cache_key`): the LLM, the prompt and its version."""
        from pyterrier_tot._plumbing.cache_key import settings_of

        return {"llm": settings_of(self.llm), **self._settings(), "prompt_dir": None,
                "prompt_version": self.prompt.version}

    def __repr__(self):
        return code_repr(self, [self.llm], self._settings())


class LLMQueryRewriter(_LLMRewriter):
    """Q: one LLM rewrite of the request into a short search query (prompt ``prompts/rewrite.txt``)."""
    prompt_name = "rewrite"
    label = "LLM rewrite"
    one_line = True


class HyDE(_LLMRewriter):
    """H: a hypothetical book description as the query (prompt ``prompts/hyde.txt``).
    ``combine="replace"`` (default, as in the paper) or ``"append"`` (original query + description)."""
    prompt_name = "hyde"
    label = "HyDE"

    @keyword_settings
    def __init__(self, llm, *, prompt: str = None, prompt_dir=None, combine: str = "replace",
                 max_query_chars: int = 6000):
        if combine not in ("replace", "append"):
            raise ValueError(f"HyDE combine must be 'replace' or 'append', not {combine!r}")
        super().__init__(llm, prompt=prompt, prompt_dir=prompt_dir, max_query_chars=max_query_chars)
        self.combine = combine

    def _combine(self, original: str, generated: str) -> str:
        return generated if self.combine == "replace" else f"{original}\n{generated}"

    def _settings(self) -> dict:
        return {**super()._settings(), "combine": self.combine}


class ClueConcatenator(pt.Transformer):
    """E / P: the query becomes the non-N/A clues joined (fields in ``fields`` order). A query whose clues are
    all N/A keeps its original text (counted in ``.fallbacks``)."""

    @keyword_settings
    def __init__(self, fields: Sequence[str] = CLUE_FIELDS, *, separator: str = ". ", labels: bool = False):
        self.fields = tuple(fields)
        self.columns = [clue_column(f) for f in self.fields]
        self.separator, self.labels = separator, labels
        self.fallbacks = 0

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # any one clue column will do (the others count as N/A), so each is its own mode
        hint = (f"needs clue columns (some of {self.columns}) in a query frame with 'query'; put a ClueDecomposer "
                "or RuleClueExtractor before it")
        with explain_columns(repr(self), hint), pta.validate.any(inp) as v:
            for c in self.columns:
                v.query_frame(["query", c], mode=c)
        # the query is the fallback text of a query whose clues are all N/A, so it must be usable too
        check_query_frame(inp, repr(self))
        out = pt.model.push_queries(inp.copy(), keep_original=False, inplace=False)
        new, fallback = [], 0
        for _, row in out.iterrows():
            parts = []
            for f, c in zip(self.fields, self.columns):
                v = row.get(c) if c in out.columns else None
                if not is_missing(v):
                    parts.append(f"{f}: {v}" if self.labels else str(v).strip())
            if parts:
                new.append(self.separator.join(parts))
            else:
                fallback += 1
                new.append(row["query_0"])
        self.fallbacks += fallback
        out["query"] = new
        return out

    def __repr__(self):
        return code_repr(self, [], {"fields": self.fields, "separator": self.separator, "labels": self.labels})
