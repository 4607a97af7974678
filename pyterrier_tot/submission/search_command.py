"""``pyterrier-tot search``: the top books for one request, with titles, authors and years, saying first what it
searches with and what it must build (with an estimate timed here) before it builds anything."""
from __future__ import annotations

from pyterrier_tot.errors import BadInputError

__all__ = ["search"]


def search(args) -> None:
    """The top ``args.k`` books for ``args.request`` from the best retriever cached (the recipe, else the
    fine-tuned base, else the training-free pipeline; ``args.retriever`` picks one, or a saved recipe's folder).
    It says what it searches with, and what it must build first with an estimate, before building anything."""
    from pyterrier_tot.clarinet.ask_retriever import choose_retriever
    from pyterrier_tot.clarinet.interactive import _line
    from pyterrier_tot.datasets import get_dataset
    from pyterrier_tot.index import BookIndex

    if bool(args.index) == bool(args.dataset):
        raise BadInputError("search: give --index DIR or --dataset NAME")
    if not args.request.strip():
        raise BadInputError("search: the request is empty")
    dataset = get_dataset(args.dataset) if args.dataset else None
    index = BookIndex(args.index) if args.index else BookIndex(dataset)
    choice = choose_retriever(index, dataset, args.retriever, k=max(args.k, 100), fallback="training-free")
    print(choice.line, flush=True)
    experts = choice.experts()
    if experts:
        from pyterrier_tot.recipe.plan import build_steps, index_plan

        plan = index_plan(index, experts, "search")
        if plan.todo:  # the first search of a cold cache encodes for minutes on a CPU: say so before it starts
            print(plan, flush=True)
            build_steps(index, plan)
    retriever = choice.make()
    res = (retriever % args.k >> index.text_loader(["title", "author", "year"])).search(args.request)
    for row in res.sort_values("rank").to_dict("records"):
        print(f"{int(row['rank']) + 1:>3}. {_line(row)}  [{row['docno']}]")

