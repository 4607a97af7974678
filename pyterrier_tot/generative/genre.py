"""Zero-shot generative retrieval with an off-the-shelf LM (GENRE-style): it may only write titles of the corpus.

An instruction-tuned causal LM (SmolLM2, or any GGUF of the Llama / Qwen families through
:func:`~pyterrier_tot.generative.backbones.gguf_lm`) reads the request inside a chat prompt
(``prompts/generative_genre.txt`` by default) and writes a title. Decoding follows a prefix trie over the
token ids of the corpus' titles, so every answer is a book of the corpus:

- :class:`PromptedBackbone` (:func:`prompted`) puts the request into the prompt: ``source_ids`` are the chat
  transcript up to the assistant's turn, ``target_ids`` a title and the end of the turn. With it,
  :meth:`GenerativeRetriever.genre <pyterrier_tot.generative.retriever.GenerativeRetriever.genre>` retrieves
  by constrained beam search (scores: the title's log-likelihood) and scores candidates by teacher forcing
  (a fuser expert). Nothing is trained.
- :func:`name_titles` writes a list instead (the constrained mode of
  :class:`~pyterrier_tot.submission.title_namer.TitleNamer`): one title per line, greedily, each line
  constrained to the titles not yet named, until the LM ends its turn or ``n`` titles are written.

Requests are cut to ``max_tokens`` tokens of the LM's tokenizer (the head is kept) before they enter the prompt.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import pandas as pd
import torch

from pyterrier_tot.generative.backbones import CAUSAL, Backbone, _pad
from pyterrier_tot.generative.trie import IdTrie

GENRE_PROMPT = "generative_genre"
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")


def title_ids(books: pd.DataFrame, title_field: str = "title") -> Dict[str, str]:
    """docno → the title as an LM would write it (whitespace collapsed; a book without a title keeps its docno)."""
    out = {}
    titles = books[title_field] if title_field in books.columns else [None] * len(books)
    for docno, title in zip(books["docno"].astype(str), titles):
        text = " ".join(str(title).split()) if isinstance(title, str) else ""
        out[docno] = text or docno
    return out


def chat_ids(tokenizer, messages: List[Dict[str, str]]) -> List[int]:
    """Token ids of a chat transcript up to the start of the assistant's answer (the tokenizer's chat template,
    or a plain ``role: text`` layout for tokenizers without one)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def end_of_turn(tokenizer) -> int:
    """The token that ends an assistant turn (``<|im_end|>`` for ChatML models), else the end token."""
    vocab = tokenizer.get_vocab()
    for tok in _END_OF_TURN:
        if tok in vocab:
            return int(vocab[tok])
    return int(tokenizer.eos_token_id)


class PromptedBackbone(Backbone):
    """A causal :class:`~pyterrier_tot.generative.backbones.Backbone` whose sources are requests inside a chat
    prompt and whose targets are plain titles ending the assistant's turn."""

    def __init__(self, base: Backbone, prompt, fill: Optional[Dict[str, str]] = None):
        if base.kind != CAUSAL:
            raise ValueError(f"a prompted backbone needs a causal LM, not a {base.kind} backbone ({base.name})")
        super().__init__(base.model, base.tokenizer, CAUSAL, name=f"{base.name} + prompt {prompt.name}", cue="")
        self.prompt, self.fill = prompt, dict(fill or {})
        self.eos = end_of_turn(base.tokenizer)

    @property
    def sep(self) -> int:
        """The token between the lines of a list: the newline token, or ``;`` for tokenizers that drop newlines."""
        nl = self._tok("\n")
        if len(nl) == 1:
            return nl[0]
        semi = self._tok(";")
        if len(semi) != 1 or semi[0] == self.tokenizer.unk_token_id:
            raise ValueError(f"{self.name}: the tokenizer has no single token for a line break or ';', so a list "
                             "of titles cannot be decoded")
        return semi[0]

    def messages(self, text: str) -> List[Dict[str, str]]:
        msgs = self.prompt.messages(text)
        for m in msgs:
            for key, value in self.fill.items():
                m["content"] = m["content"].replace("{" + key + "}", str(value))
        return msgs

    def source_ids(self, text: str, max_tokens: int) -> List[int]:
        ids = self._tok(str(text))
        if len(ids) > max_tokens:
            text = self.tokenizer.decode(ids[:max_tokens])
        return chat_ids(self.tokenizer, self.messages(text))

    def target_ids(self, identifier: str) -> List[int]:
        return self._tok(identifier) + [self.eos]

    def line_ids(self, identifier: str) -> List[int]:
        """A title as one line of a list: its tokens and the line separator."""
        return self._tok(identifier) + [self.sep]


def prompted(base: Backbone, prompt: str = GENRE_PROMPT, prompt_dir=None,
             fill: Optional[Dict[str, str]] = None) -> PromptedBackbone:
    """``base`` (a causal LM backbone, e.g. :func:`~pyterrier_tot.generative.backbones.smollm2`) behind the chat
    prompt ``prompts/<prompt>.txt``; ``fill`` replaces ``{name}`` placeholders other than ``{query}``."""
    from pyterrier_tot.llm.templates import load_prompt

    return PromptedBackbone(base, load_prompt(prompt, prompt_dir), fill)


@torch.inference_mode()
def name_titles(backbone: PromptedBackbone, sources: Sequence[List[int]], lines: IdTrie,
                n: int) -> List[List[Tuple[int, ...]]]:
    """For each source (prompt ids), the titles the LM lists, in its order: greedy decoding where each line must
    follow ``lines`` (a trie of :meth:`PromptedBackbone.line_ids`), no title twice, at least one and at most ``n``
    lines (the LM may end its turn after any complete line). Each returned item is a complete line of
    ``lines``."""
    model, sep, end = backbone.model, backbone.sep, backbone.eos
    longest = max((len(s) for s in lines), default=1)
    out: List[List[Tuple[int, ...]]] = []
    model.eval()
    for src in sources:
        enc = _pad([list(src)], backbone.pad, left=True)
        skip = enc["input_ids"].shape[1]

        def allowed(_batch_id, ids, skip=skip):
            done, partial = _split_lines(ids[skip:].tolist(), sep)
            if len(done) >= n or (partial and partial[-1] == end):
                return [end]
            nxt = lines.allowed(partial, exclude=done)
            return nxt + [end] if done and not partial else (nxt or [end])

        gen = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                             max_new_tokens=n * longest + 1, prefix_allowed_tokens_fn=allowed, do_sample=False,
                             num_beams=1, pad_token_id=backbone.pad, eos_token_id=end)
        done, _ = _split_lines(gen[0, skip:].tolist(), sep)
        out.append([d for d in done if lines.complete(d)][:n])
    return out


def _split_lines(tokens: List[int], sep: int) -> Tuple[List[Tuple[int, ...]], List[int]]:
    """(complete lines, each ending with ``sep``; the unfinished rest)."""
    done, cur = [], []
    for t in tokens:
        cur.append(t)
        if t == sep:
            done.append(tuple(cur))
            cur = []
    return done, cur


def line_trie(backbone: PromptedBackbone, titles: Dict[str, str]) -> Tuple[IdTrie, Dict[tuple, List[str]]]:
    """The trie of the titles as list lines, and line tokens → the docnos with that title."""
    docnos: Dict[tuple, List[str]] = {}
    for d, t in sorted(titles.items()):
        docnos.setdefault(tuple(backbone.line_ids(t)), []).append(d)
    return IdTrie(docnos), docnos


