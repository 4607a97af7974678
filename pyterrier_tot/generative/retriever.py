"""``GenerativeRetriever``: a trained generative model as a PyTerrier transformer, and its saved form.

Two modes, chosen from the input columns (``pta.validate.any``, so ``pt.inspect`` reports both):

- **retrieve** (a query frame): constrained beam search over the book-id trie; each valid identifier maps back
  to its docno, scored by the sequence log-likelihood; ``num_results`` rows per query (fewer when the beam
  finds fewer valid ids). With chapter-ids in the model and ``aggregation="parallel"`` or ``"serial"``,
  book and chapter decodes are combined (:mod:`~pyterrier_tot.generative.aggregation`).
- **score** (a result frame): the teacher-forced log-likelihood of each candidate's book-id given the query, so
  the model can rerank or join a fuser as one more expert. A docno without an identifier raises
  :class:`~pyterrier_tot.errors.UnknownDocnoError`.

Queries longer than ``max_source_tokens`` tokens are cut (the head is kept). :meth:`GenerativeRetriever.save`
writes a :class:`GenerativeModel` artifact (``pt_meta.json``, ``model.safetensors``, the model config, the
tokenizer files, ``ids.json`` and ``chapters.json``); ``pt.Artifact.load(path).retriever()`` rebuilds the trie
from the id map.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Optional, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.artifact import ToTArtifact, building
from pyterrier_tot.checks import add_ranks, check_query_frame, check_result_frame, report_missing_qids, unknown_docnos
from pyterrier_tot.generative.aggregation import BETA, GAMMA, parallel_scores, serial_scores
from pyterrier_tot.generative.backbones import SEQ2SEQ, Backbone
from pyterrier_tot.generative.decoding import constrained_search, score_targets
from pyterrier_tot.generative.sentence_backbone import SENTENCE, SentenceBackbone
from pyterrier_tot.generative.trie import IdTrie
from pyterrier_tot.models.fingerprint import model_fingerprint

AGGREGATIONS = (None, "parallel", "serial")
_OUT = ["qid", "query", "docno", "score", "rank"]


class GenerativeRetriever(pt.Transformer):
    """Generate book identifiers for queries (retrieve mode) or score candidate books (score mode).

    :param backbone: a trained :class:`~pyterrier_tot.generative.backbones.Backbone`
    :param ids: docno → book-id
    :param num_results: books per query in retrieve mode
    :param num_beams: beam width (default ``num_results``)
    :param chapters: chapter-id → docno (enables ``aggregation``)
    :param aggregation: ``None``, ``"parallel"`` or ``"serial"``
    :param shared_ids: let books share an identifier (GENRE titles: two books called "Dune" are both returned,
        with the same score, when the title is generated); by default ids must be unique
    :param label: a name shown in the ``repr`` (a saved model uses its folder name), which tells two models
        with the same backbone apart, e.g. in a cache key built from the ``repr``
    """

    def __init__(self, backbone: Backbone, ids: Dict[str, str], num_results: int = 10,
                 num_beams: Optional[int] = None, max_source_tokens: int = 64, batch_size: int = 8,
                 score_batch_size: int = 32, chapters: Optional[Dict[str, str]] = None,
                 aggregation: Optional[str] = None, beta: float = BETA, gamma: float = GAMMA,
                 verbose: bool = False, shared_ids: bool = False, label: Optional[str] = None):
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, not {aggregation!r}")
        if aggregation and not chapters:
            raise ValueError(f"aggregation={aggregation!r} needs chapter-ids (chapters=...)")
        self.backbone, self.ids = backbone, {str(k): v for k, v in ids.items()}
        self.num_results, self.num_beams = int(num_results), int(num_beams or num_results)
        self.max_source_tokens, self.batch_size, self.score_batch_size = max_source_tokens, batch_size, score_batch_size
        self.chapters = dict(chapters or {})
        self.aggregation, self.beta, self.gamma, self.verbose = aggregation, beta, gamma, verbose
        self.shared_ids, self.label = bool(shared_ids), label
        self._tokens = {d: tuple(backbone.target_ids(i)) for d, i in self.ids.items()}
        self._docnos_of: Dict[tuple, list] = {}
        for d, t in sorted(self._tokens.items()):
            self._docnos_of.setdefault(t, []).append(d)
        if not self.shared_ids and len(self._docnos_of) != len(self._tokens):
            raise ValueError("two books have identifiers with the same tokens; make the ids unique "
                             "(pyterrier_tot.generative.identifiers.book_ids does) or pass shared_ids=True")
        self.trie = IdTrie(self._tokens.values())
        self._chapter_tokens = {tuple(backbone.target_ids(c)): str(d) for c, d in self.chapters.items()}
        self.chapter_trie = IdTrie(self._chapter_tokens)
        self._book_tries: Dict[str, IdTrie] = {}
        for toks, d in self._chapter_tokens.items():
            self._book_tries.setdefault(d, IdTrie()).add(toks)
        self.empty_results = 0

    # ----------------------------------------------------------------------------------------------- modes
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.result_frame(extra_columns=["query"], mode="score")
            v.query_frame(extra_columns=["query"], mode="retrieve")
        if v.mode == "score":
            return self._score(inp)
        return self._retrieve(inp)

    def _sources(self, queries) -> list:
        return [self.backbone.source_ids(q, self.max_source_tokens) for q in queries]

    def _score(self, inp: pd.DataFrame) -> pd.DataFrame:
        check_result_frame(inp, repr(self), "query")
        out = inp.copy()
        if len(out) == 0:
            return out.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        unknown_docnos(out, self.ids.keys(), repr(self))
        out["score"] = score_targets(self.backbone, self._sources(out["query"]),
                                     [self._tokens[str(d)] for d in out["docno"]], self.score_batch_size)
        return add_ranks(out.drop(columns=["rank"], errors="ignore"))

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        check_query_frame(inp, repr(self))
        if len(inp) == 0:
            return pd.DataFrame(columns=list(inp.columns) + [c for c in _OUT if c not in inp.columns])
        queries = inp["query"].tolist()
        sources = self._sources(queries)
        hits = constrained_search(self.backbone, sources, self.trie, self.num_beams, self.batch_size)
        rows = []
        for qi, qhits in enumerate(hits):
            books = {d: s for t, s in qhits for d in self._docnos_of[t]}
            scores = self._aggregate(sources[qi], books) if self.aggregation else books
            order = sorted(scores, key=lambda d: (-scores[d], -books.get(d, -math.inf)))[:self.num_results]
            rows += [(qi, d, float(scores[d])) for d in order]
        res = pd.DataFrame(rows, columns=["_row", "docno", "score"])
        keep = inp.reset_index(drop=True)
        out = keep.iloc[res["_row"].to_numpy()].reset_index(drop=True)
        out = out.drop(columns=[c for c in ("docno", "score", "rank") if c in out.columns])
        out["docno"], out["score"] = res["docno"].to_numpy(), res["score"].to_numpy(dtype=float)
        report_missing_qids(inp, out, repr(self), owner=self)
        return pt.model.add_ranks(out)

    def _aggregate(self, source, books: Dict[str, float]) -> Dict[str, float]:
        if self.aggregation == "parallel":
            found = constrained_search(self.backbone, [source], self.chapter_trie, self.num_beams, 1)[0]
            return parallel_scores(books, [self._chapter_tokens[t] for t, _ in found])
        per_book = {}
        for d in books:
            trie = self._book_tries.get(d)
            if trie is not None:
                per_book[d] = [s for _, s in constrained_search(self.backbone, [source], trie,
                                                                min(self.num_beams, len(trie)), 1)[0]]
        return serial_scores(books, per_book, self.beta, self.gamma)

    # ----------------------------------------------------------------------------------------------- saving
    @classmethod
    def genre(cls, backbone: Backbone, books: pd.DataFrame, title_field: str = "title",
              **kwargs) -> "GenerativeRetriever":
        """The GENRE-style zero-shot mode: an off-the-shelf LM behind a prompt
        (:func:`~pyterrier_tot.generative.genre.prompted`) generates titles, constrained to those of ``books``;
        books with the same title share it. Nothing is trained."""
        from pyterrier_tot.generative.genre import title_ids

        kwargs.setdefault("max_source_tokens", 384)
        return cls(backbone, title_ids(books, title_field), shared_ids=True, **kwargs)

    def save(self, path: Union[str, Path], overwrite: bool = False, **meta) -> "GenerativeModel":
        """Write the model, tokenizer and id maps as a :class:`GenerativeModel` artifact folder."""
        from safetensors.torch import save_model

        if getattr(self.backbone, "prompt", None) is not None:
            raise ValueError(f"{self!r} is a zero-shot prompted LM with no trained weights of its own: build it "
                             "again with GenerativeRetriever.genre(...) instead of saving it")
        art = GenerativeModel(path)
        with building(path, overwrite=overwrite) as tmp:
            if hasattr(self.backbone, "save_to"):  # the sentence-encoder backbone writes its own parts
                self.backbone.save_to(tmp)
            else:
                self.backbone.model.config.save_pretrained(tmp)
                save_model(self.backbone.model, str(tmp / "model.safetensors"))
                self.backbone.tokenizer.save_pretrained(tmp)
            (tmp / "ids.json").write_text(json.dumps(self.ids, ensure_ascii=False), encoding="utf8")
            (tmp / "chapters.json").write_text(json.dumps(self.chapters, ensure_ascii=False), encoding="utf8")
            art._write_meta(tmp, kind=self.backbone.kind, backbone=self.backbone.name, books=len(self.ids),
                            chapters=len(self.chapters), max_source_tokens=self.max_source_tokens,
                            cue=self.backbone.cue, shared_ids=self.shared_ids, **meta)
        return art

    def settings(self) -> dict:
        """What changes its scores (the key of the recipe's weights fitted with it as an expert,
        :mod:`pyterrier_tot._plumbing.cache_key`): the backbone, the identifiers, the decoding, and a loaded model's
        weights."""
        import hashlib
        import json

        ids = hashlib.sha1(json.dumps(sorted(self.ids.items())).encode()).hexdigest()
        chapters = hashlib.sha1(json.dumps(sorted(self.chapters.items()), default=str).encode()).hexdigest()
        agg = {"aggregation": self.aggregation, "beta": self.beta, "gamma": self.gamma,
               "chapters": chapters} if self.aggregation else {}
        return {"backbone": self.backbone.name, "ids": ids, "num_results": self.num_results,
                "num_beams": self.num_beams, "max_source_tokens": self.max_source_tokens, "label": self.label,
                "weights": getattr(self, "weights", None), **agg}

    def __repr__(self):
        # the call that makes it (the backbone and the identifiers in memory shown as what they are), every
        # setting that changes a score where it is not the default; a loaded model by its folder (label)
        from pyterrier_tot._plumbing.reprs import Shown, code_repr

        chapters = Shown(f"chapter-ids of {len(self.chapters)} books") if self.chapters else None
        beams = None if self.num_beams == self.num_results else self.num_beams
        weights = f", weights={self.weights}" if getattr(self, "weights", None) else ""
        backbone = Shown(f"backbone {self.backbone.name!r}{weights}")
        return code_repr(self, [backbone, Shown(f"ids of {len(self.ids)} books")], {
            "num_results": self.num_results, "num_beams": beams,
            "max_source_tokens": self.max_source_tokens, "chapters": chapters, "aggregation": self.aggregation,
            "beta": self.beta if self.aggregation else BETA, "gamma": self.gamma if self.aggregation else GAMMA,
            "shared_ids": self.shared_ids, "label": self.label})


class GenerativeModel(ToTArtifact):
    """A saved generative retriever (type ``generative_retriever``): ``.retriever(**kw)`` loads it."""

    ARTIFACT_TYPE = "generative_retriever"

    def backbone(self) -> Backbone:
        import torch
        from safetensors.torch import load_model
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        self._check_type()
        meta = self.meta()
        if meta["kind"] == SENTENCE:
            return SentenceBackbone.load(self.path)
        config = AutoConfig.from_pretrained(self.path)
        cls = AutoModelForSeq2SeqLM if meta["kind"] == SEQ2SEQ else AutoModelForCausalLM
        model = cls.from_config(config, dtype=torch.float32)
        load_model(model, str(Path(self.path) / "model.safetensors"))
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(self.path)
        return Backbone(model, tokenizer, meta["kind"], name=meta.get("backbone", "saved"), cue=meta["cue"])

    def ids(self) -> Dict[str, str]:
        return json.loads((Path(self.path) / "ids.json").read_text(encoding="utf8"))

    def retriever(self, **kwargs) -> GenerativeRetriever:
        meta = self.meta()
        chapters = json.loads((Path(self.path) / "chapters.json").read_text(encoding="utf8"))
        kwargs.setdefault("max_source_tokens", meta.get("max_source_tokens", 64))
        kwargs.setdefault("shared_ids", meta.get("shared_ids", False))
        kwargs.setdefault("label", Path(self.path).name)
        retriever = GenerativeRetriever(self.backbone(), self.ids(), chapters=chapters or None, **kwargs)
        retriever.weights = (model_fingerprint(self.path) or "")[:10] or None  # a model saved again is another one
        return retriever


def hits_at(retriever: GenerativeRetriever, sources: pd.DataFrame, k: int = 1) -> float:
    """Share of ``sources`` rows (columns ``source``, ``docno``) whose docno the retriever ranks in its top ``k``:
    the training check that a model has learnt its indexing inputs."""
    q = pd.DataFrame({"qid": [f"s{i}" for i in range(len(sources))], "query": list(sources["source"])})
    res = retriever(q)
    top = res[res["rank"] < k].groupby("qid")["docno"].apply(set).to_dict()
    return float(np.mean([d in top.get(f"s{i}", ()) for i, d in enumerate(sources["docno"])])) if len(q) else 0.0
