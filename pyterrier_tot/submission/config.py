"""Pipeline configs: a small TOML file → dataset, index and a ``pt.Transformer`` (see ``docs/submission.rst``).

    cfg = load_config("query_stage.toml")   # top-level run_tag, depth, description; tables [dataset], [index],
    pipe = cfg.build()                      # [llm]; [[pipeline]] stage tables (examples: submission/configs/)

Stages are composed with ``>>``. A stage name is one of :data:`STAGES` (library classes and functions) or
:data:`INDEX_METHODS` (methods of the :class:`~pyterrier_tot.index.BookIndex`); the other keys are its
parameters, checked against its signature before anything is built. Parameters named ``index``, ``dataset``
and ``llm`` are filled in (the ``[llm]`` table holds :class:`~pyterrier_tot.llm.LLM` arguments); a parameter
given as a table with a ``stage`` key is built as a stage (``decomposer = {stage = "RuleClueExtractor"}``).
``stage = "fuse"`` fuses ``inputs`` (a list of stage lists) by ``method`` ``rrf`` or ``combsum``. A bad config
raises :class:`ConfigError` naming the key (``pipeline[2].k``).
"""
from __future__ import annotations

import importlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.datasets.base import BookDataset, read_jsonl, read_topics, read_trec_qrels  # noqa: F401
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.errors import BadInputError, ConfigError  # ConfigError lives in errors.py; re-exported here
from pyterrier_tot.submission.fusion import FUSION_METHODS, Fusion
from pyterrier_tot.submission.param_types import _check_param, _signature, _type_name

__all__ = ["ConfigError", "PipelineConfig", "load_config", "STAGES", "INDEX_METHODS", "read_topics"]

#: Stage names a config may use → where they live (imported only when a config names them).
STAGES = {
    "HedgeRemover": "pyterrier_tot.query.hedge_remover:HedgeRemover",
    "NegationPenalty": "pyterrier_tot.query.negation_penalty:NegationPenalty",
    "LLMQueryRewriter": "pyterrier_tot.query.rewriters:LLMQueryRewriter",
    "HyDE": "pyterrier_tot.query.rewriters:HyDE",
    "ClueConcatenator": "pyterrier_tot.query.rewriters:ClueConcatenator",
    "RuleClueExtractor": "pyterrier_tot.decomposition.rule_clue_extractor:RuleClueExtractor",
    "ClueDecomposer": "pyterrier_tot.decomposition.clue_decomposer:ClueDecomposer",
    "decomposition_pipeline": "pyterrier_tot.decomposition.pipeline:decomposition_pipeline",
    "tuned_pipeline": "pyterrier_tot.recipe.tuned:tuned_pipeline",
    "DenseReranker": "pyterrier_tot.rerank.dense_reranker:DenseReranker",
    "ListwiseReranker": "pyterrier_tot.rerank.listwise_reranker:ListwiseReranker",
    "PointwiseLLMReranker": "pyterrier_tot.rerank.pointwise_reranker:PointwiseLLMReranker",
    "TitleNamer": "pyterrier_tot.submission.title_namer:TitleNamer",
    "Normalise": "pyterrier_tot.normalise:Normalise",
}
#: BookIndex methods a config may use as stages.
INDEX_METHODS = ("bm25", "dense", "dense_scorer", "text_loader")
FUSE = "fuse"
_INJECTED = ("index", "dataset", "llm")
_TOP_KEYS = {"run_tag", "depth", "description", "dataset", "index", "llm", "pipeline"}
_DATASET_KEYS = {"name", "split", "corpus", "topics", "qrels"}
_INDEX_KEYS = {"path"}
_FUSE_KEYS = {"stage", "inputs", "method", "weights", "rr_k", "num_results"}


# ---------------------------------------------------------------------------------------------- stages
def _resolve(name: str, key: str, source) -> Any:
    """The callable behind a stage name (imported on first use, so optional stages cost nothing)."""
    if name not in STAGES:
        allowed = sorted(STAGES) + list(INDEX_METHODS) + [FUSE]
        raise ConfigError(key, f"unknown stage {name!r}; stages are {allowed}", source)
    module, attr = STAGES[name].split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(key, f"stage {name!r} is not available in this installation ({e})", source) from e


def _callable_of(name: str, key: str, source):
    if name in INDEX_METHODS:
        from pyterrier_tot.index import BookIndex

        return getattr(BookIndex, name)
    return _resolve(name, key, source)


def _as_stage_list(value, key: str, source) -> List[dict]:
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"stage": item}
        if not isinstance(item, dict) or not isinstance(item.get("stage"), str):
            raise ConfigError(f"{key}[{i}]", "a stage is a table with a 'stage' name (or a stage name)", source)
        out.append(item)
    if not out:
        raise ConfigError(key, "needs at least one stage", source)
    return out


def _check_stage(spec: dict, key: str, source) -> None:
    """Check a stage's name and parameters (names and types) without building it."""
    name = spec["stage"]
    if name == FUSE:
        for k in spec:
            if k not in _FUSE_KEYS:
                raise ConfigError(f"{key}.{k}", f"unknown parameter of 'fuse'; parameters are {sorted(_FUSE_KEYS)}",
                                  source)
        if spec.get("method", "rrf") not in FUSION_METHODS:
            raise ConfigError(f"{key}.method", f"unknown fusion {spec['method']!r}; one of {list(FUSION_METHODS)}",
                              source)
        branches = spec.get("inputs")
        if not isinstance(branches, list) or len(branches) < 2:
            raise ConfigError(f"{key}.inputs", "fuse needs a list of at least two stage lists", source)
        for i, branch in enumerate(branches):
            for j, sub in enumerate(_as_stage_list(branch, f"{key}.inputs[{i}]", source)):
                _check_stage(sub, f"{key}.inputs[{i}][{j}]", source)
        weights = spec.get("weights")
        if weights is not None and (not isinstance(weights, list) or len(weights) != len(branches)
                                    or not all(isinstance(w, (int, float)) for w in weights)):
            raise ConfigError(f"{key}.weights", f"needs {len(branches)} numbers, one per input", source)
        return
    params = dict(_signature(_callable_of(name, key, source)).parameters)
    params.pop("self", None)
    for k, value in spec.items():
        if k == "stage":
            continue
        if k in _INJECTED and k in params:
            raise ConfigError(f"{key}.{k}", f"{k!r} is filled in from the config; do not set it", source)
        if k not in params:
            known = sorted(p for p in params if p not in _INJECTED)
            raise ConfigError(f"{key}.{k}", f"unknown parameter of {name}; parameters are {known}", source)
        if isinstance(value, dict) and "stage" in value:
            _check_stage(value, f"{key}.{k}", source)
        _check_param(f"{key}.{k}", params[k], value, source)


# ---------------------------------------------------------------------------------------------- data files
class _FileDataset(BookDataset):
    """A corpus JSONL (one book per line: ``docno`` or ``doc_id`` + book fields) with optional topics/qrels."""

    splits = ("file",)

    def __init__(self, corpus: Path, topics: Optional[Path] = None, qrels: Optional[Path] = None):
        self.corpus, self.topics, self.qrels = corpus, topics, qrels
        self.name = corpus.stem

    def _check_split(self, split):
        return "file"

    def _load_books(self) -> List[Book]:
        return [Book.from_dict({"docno": d.get("docno", d.get("doc_id", d.get("id"))), **d})
                for d in progress_bar(read_jsonl(self.corpus), desc=f"reading {self.corpus.name}", unit="book")]

    def _load_topics(self, split):
        if self.topics is None:
            raise BadInputError(f"{self.name}: the config names no topics file ([dataset] topics)")
        return read_topics(self.topics)

    def _load_qrels(self, split):
        if self.qrels is None:
            raise BadInputError(f"{self.name}: the config names no qrels file ([dataset] qrels)")
        return read_trec_qrels(self.qrels)


# ---------------------------------------------------------------------------------------------- the config
@dataclass
class PipelineConfig:
    """A checked config (see the module doc). ``build()`` gives the pipeline; ``dataset()``, ``topics()``,
    ``qrels()`` and ``book_index()`` the data it runs on."""
    pipeline: List[dict]
    run_tag: str = "pyterrier_tot"
    depth: int = 1000
    dataset_spec: Dict[str, Any] = field(default_factory=dict)
    index_spec: Dict[str, Any] = field(default_factory=dict)
    llm_spec: Dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: Optional[str] = None
    base_dir: Path = field(default_factory=Path.cwd)

    def _path(self, value) -> Path:
        p = Path(os.path.expanduser(str(value)))
        return p if p.is_absolute() else self.base_dir / p

    def dataset(self) -> BookDataset:
        spec = self.dataset_spec
        if "name" in spec:
            from pyterrier_tot.datasets import get_dataset

            return get_dataset(spec["name"])
        return _FileDataset(self._path(spec["corpus"]), *(self._path(spec[k]) if spec.get(k) else None
                                                          for k in ("topics", "qrels")))

    def topics(self, path=None) -> pd.DataFrame:
        if path is not None:
            return read_topics(path)
        if self.dataset_spec.get("topics"):
            return read_topics(self._path(self.dataset_spec["topics"]))
        return self.dataset().get_topics(self.dataset_spec.get("split"))

    def qrels(self, path=None) -> pd.DataFrame:
        if path is not None:
            return read_trec_qrels(Path(path))
        if self.dataset_spec.get("qrels"):
            return read_trec_qrels(self._path(self.dataset_spec["qrels"]))
        return self.dataset().get_qrels(self.dataset_spec.get("split"))

    def book_index(self, path=None, build: bool = False):
        """The :class:`~pyterrier_tot.index.BookIndex`: a folder already built is opened as it is (fast: the
        corpus is not read again), unless ``build`` (the ``index`` command), which checks it against the corpus
        and builds what is missing or stale."""
        from pyterrier_tot._plumbing.artifact import read_meta
        from pyterrier_tot.index import BookIndex

        where = path or (self._path(self.index_spec["path"]) if self.index_spec.get("path") else None)
        if where is not None and not build and (Path(where) / "pt_meta.json").is_file():
            if read_meta(Path(where)).get("type") == BookIndex.ARTIFACT_TYPE:
                return BookIndex(where)
        return BookIndex(self.dataset(), path=where)

    def build(self, index=None, dataset=None, llm=None) -> pt.Transformer:
        """The pipeline, its stages composed with ``>>``; the index, dataset and LLM are made when a stage needs
        them (pass them to reuse ones already open)."""
        made: Dict[str, Any] = {"index": index, "dataset": dataset, "llm": llm}

        def need(what: str):
            if made[what] is None:
                if what == "dataset":
                    made[what] = self.dataset()
                elif what == "index":
                    made[what] = self.book_index()
                else:
                    from pyterrier_tot.llm import LLM

                    made[what] = LLM(**self.llm_spec)
            return made[what]

        def build_stage(spec: dict, key: str) -> pt.Transformer:
            name = spec["stage"]
            try:
                if name == FUSE:
                    branches = [chain(_as_stage_list(b, f"{key}.inputs[{i}]", self.source), f"{key}.inputs[{i}]")
                                for i, b in enumerate(spec["inputs"])]
                    return Fusion(branches, spec.get("method", "rrf"), spec.get("weights"), spec.get("rr_k", 60.0),
                                  spec.get("num_results", self.depth))
                kwargs = {k: (build_stage(v, f"{key}.{k}") if isinstance(v, dict) and "stage" in v else v)
                          for k, v in spec.items() if k != "stage"}
                if name in INDEX_METHODS:
                    return getattr(need("index"), name)(**kwargs)
                target = _resolve(name, key, self.source)
                params = _signature(target).parameters
                for what in _INJECTED:
                    if what in params:
                        kwargs[what] = need(what)
                return target(**kwargs)
            except (ValueError, TypeError) as e:
                if isinstance(e, ConfigError):
                    raise
                raise ConfigError(key, f"{name}: {e}", self.source) from e

        def chain(specs: List[dict], key: str) -> pt.Transformer:
            stages = [build_stage(s, f"{key}[{i}]")
                      for i, s in enumerate(progress_bar(specs, desc="building stages", unit="stage", min_items=3))]
            pipe = stages[0]
            for s in stages[1:]:
                pipe = pipe >> s
            return pipe

        return chain(self.pipeline, "pipeline")


#: The example configs shipped with the package (``pyterrier-tot configs`` lists them).
CONFIG_DIR = Path(__file__).parent / "configs"


def example_configs() -> Dict[str, str]:
    """name → description of every shipped example config."""
    out = {}
    for path in sorted(CONFIG_DIR.glob("*.toml")):
        with open(path, "rb") as f:
            out[path.stem] = str(tomllib.load(f).get("description", ""))
    return out


def example_config(name: str) -> Path:
    """The path of a shipped example config by name (``query_stage``, ``decomposition``, ``title_naming``)."""
    path = CONFIG_DIR / f"{str(name).removesuffix('.toml')}.toml"
    if not path.is_file():
        raise KeyError(f"no example config {name!r}; available: {sorted(example_configs())}")
    return path


def _config_file(config: Union[str, os.PathLike]) -> Path:
    """A config path as given, or else the shipped example of that name; neither raises naming both."""
    path = Path(config)
    if path.exists():
        return path
    if path.parent == Path(".") and (CONFIG_DIR / f"{path.name.removesuffix('.toml')}.toml").is_file():
        return example_config(path.name)
    raise FileNotFoundError(f"config {str(config)!r} is neither a file nor a shipped example config; shipped: "
                            f"{', '.join(sorted(example_configs()))} (pyterrier-tot configs lists them)")


def load_config(config: Union[str, os.PathLike, dict], base_dir: Union[str, os.PathLike, None] = None
                ) -> PipelineConfig:
    """Read and check a config (a TOML path, the name of a shipped example config such as ``query_stage``, or
    the same as a dict): unknown keys, unknown stages, unknown parameters and wrongly typed values raise
    :class:`ConfigError` naming the key. Nothing is built."""
    source = None
    if isinstance(config, dict):
        data = config
    else:
        config = _config_file(config)
        source = str(config)
        try:
            with open(config, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("(toml)", f"not valid TOML: {e}", source) from e
        base_dir = base_dir or Path(config).resolve().parent
    for k in data:
        if k not in _TOP_KEYS:
            raise ConfigError(k, f"unknown key; keys are {sorted(_TOP_KEYS)}", source)
    for name, allowed in (("dataset", _DATASET_KEYS), ("index", _INDEX_KEYS)):
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(name, f"must be a table, not {_type_name(table)}", source)
        for k, v in table.items():
            if k not in allowed:
                raise ConfigError(f"{name}.{k}", f"unknown key; keys are {sorted(allowed)}", source)
            if not isinstance(v, str):
                raise ConfigError(f"{name}.{k}", f"wrong type: {_type_name(v)} {v!r}, expected str", source)
    ds = data.get("dataset", {})
    if ds and ("name" in ds) == ("corpus" in ds):
        raise ConfigError("dataset", "give either name (a ptt.get_dataset name) or corpus (a JSONL file)", source)
    tag = data.get("run_tag", "pyterrier_tot")
    from pyterrier_tot.submission.run_checks import TAG_PATTERN

    if not isinstance(tag, str) or not TAG_PATTERN.match(tag):
        raise ConfigError("run_tag", f"{tag!r} must be 1-25 letters, digits, '_' or '-'", source)
    depth = data.get("depth", 1000)
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 1000:
        raise ConfigError("depth", f"{depth!r} must be an integer from 1 to 1000", source)
    llm = data.get("llm", {})
    if not isinstance(llm, dict):
        raise ConfigError("llm", f"must be a table, not {_type_name(llm)}", source)
    from pyterrier_tot.llm import LLM

    llm_params = _signature(LLM).parameters
    for k, v in llm.items():
        if k not in llm_params:
            raise ConfigError(f"llm.{k}", f"unknown LLM parameter; parameters are {sorted(llm_params)}", source)
        _check_param(f"llm.{k}", llm_params[k], v, source)
    if "pipeline" not in data:
        raise ConfigError("pipeline", "missing: list the stages as [[pipeline]] tables", source)
    stages = _as_stage_list(data["pipeline"], "pipeline", source)
    for i, spec in enumerate(stages):
        _check_stage(spec, f"pipeline[{i}]", source)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError("description", f"wrong type: {_type_name(description)}, expected str", source)
    return PipelineConfig(stages, tag, depth, dict(ds), dict(data.get("index", {})), dict(llm), description,
                          source, Path(base_dir) if base_dir else Path.cwd())
