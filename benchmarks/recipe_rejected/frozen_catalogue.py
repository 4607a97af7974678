"""Training the requests against a catalogue encoded once: does the recipe keep its quality at a fraction of the cost?

    python benchmarks/recipe_rejected/frozen_catalogue.py run     # trains each variant, cheapest first, till one passes
    python benchmarks/recipe_rejected/frozen_catalogue.py cost    # seconds per step: a pair step against a request step
    python benchmarks/recipe_rejected/frozen_catalogue.py birco   # each measured row's recipe on BIRCO dev, transferred
    python benchmarks/recipe_rejected/frozen_catalogue.py render  # results/frozen_catalogue.{json,md} from rows kept

The default recipe trains mpnet and its MiniLM helper on (request, book) pairs: every step encodes both sides and
back-propagates through both, and each trained model encodes all 2,679 books again. Each variant here trains both
models' *request* side only (``recipe.train_request_encoder``) against the zero-shot index of the
same model, which the training-free experts need anyway; nothing is encoded after training. Both models get the
same variant, with the default's learning rate, epochs and 256 tokens (``bases.BASE_SETTINGS``), on the training
queries outside the tuning slice:

- ``top4-catalogue``: the top 4 of 12 (mpnet) / 6 (MiniLM) layers trained, a softmax over the whole catalogue;
- ``catalogue``: every layer of the request encoder, a softmax over the whole catalogue;
- ``mined``: every layer, the batch's gold books plus each request's 4 top non-gold books of the frozen index
  (the variant that scales to 6.4M pages: only those rows are read);
- ``batch``: every layer, the batch's gold books only (the default's negatives, less its books' gradient).

The rule, written before the run (the training-cost study's non-inferiority margins, on the tuning slice of 300
training queries that nothing trains on): a variant's recipe passes when (1) its objective there (the mean over
queries of the mean of R@1, R@5, R@10, R@20, R@100 and MRR, ``recipe.FIT_METRIC``) is not below the default
recipe's, same run, by more than .0067 (the seed-to-seed standard deviation of that objective for the default's
base over six seeds, ``results/soup.md``), and (2) its R@5 there is not below the default's by more than 2 queries of
300. Variants are tried cheapest first (the order above, by measured seconds per step) and the first that passes is
adopted as the default's training; if none passes, the default stays and the table says by how much each missed.
Validation (233 queries) and BIRCO dev are reported beside, with paired p-values, and choose nothing.

(Added after the run, on how BIRCO is measured.) On BIRCO (57 requests, another catalogue) each recipe is saved and
transferred (``RecipeArtifact.transfer``, nothing fitted there): a request encoder searches BIRCO's vectors of its
book model, encoded there once.

Cost is reported per model: seconds per step (from each model's training record), whole training seconds, and the
encoding the default spends after training that a frozen catalogue does not.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe_rejected")]  # study, benchmarks/, rejected
import _common  # noqa: E402
import training_cost  # noqa: E402  (the same measures, splits, default row and margins)

NAME = "frozen_catalogue"
VARIANTS = {
    "top4-catalogue": {"negatives": "catalogue", "trainable_layers": 4},
    "catalogue": {"negatives": "catalogue"},
    "mined": {"negatives": "mined", "n_mined": 4},
    "batch": {"negatives": "batch"},
}
WORK = _common.WORK / NAME
#: Each measured row (the default's and each variant's, with its per-query objectives) is committed here as it is
#: measured: a study of hours may span sessions, and a later one runs only the variants still missing.
ROWS = _common.results_dir(__file__) / "frozen_catalogue_rows"


def request_encoders(ds, index, variant: str) -> dict:
    """{"mpnet": folder, "minilm": folder}: both models' request encoders of ``variant``, trained (or reused)."""
    from pyterrier_tot.recipe import BASE_SETTINGS, train_data, train_request_encoder

    topics, qrels = train_data(ds, "rest")
    out = {}
    for model in ("mpnet", "minilm"):
        s = BASE_SETTINGS[model]
        settings = dict(VARIANTS[variant])
        if model == "minilm" and settings.get("trainable_layers"):
            settings["trainable_layers"] = 2  # the top third, as mpnet's 4 of 12
        out[model] = str(train_request_encoder(topics, qrels, index, model, lr=s["lr"], epochs=s["epoch"],
                                               amp=s["amp"] == "auto", max_seq_length=256, **settings))
    return out


def run_variant(name: str, ds, index) -> dict:
    import pyterrier_tot as ptt
    from pyterrier_tot.recipe.expert_training import training_metadata

    out = ROWS / f"{name}.json"
    if out.is_file():
        return json.loads(out.read_text())
    t0 = time.perf_counter()
    models = request_encoders(ds, index, name)
    dp = ptt.tuned_pipeline(ds, index, fine_tuned={"dense_ft_mpnet": models["mpnet"]},
                            helpers={"dense_ft": models["minilm"]}, verbose=False)
    row = {"name": name, "settings": VARIANTS[name], "wall_s": round(time.perf_counter() - t0, 1),
           "machine": _common.machine(), "load_average": [round(x, 1) for x in os.getloadavg()],
           "train_s": {m: training_metadata(f)["seconds"] for m, f in models.items()},
           "s_per_step": {m: training_metadata(f)["seconds_per_step"] for m, f in models.items()}}
    for split, (t, q) in training_cost.splits(ds).items():
        row[split] = training_cost.measured(dp, t, q)
    ROWS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row))
    return row


def default_row(ds, index) -> dict:
    """The default recipe's row (``training_cost.default_row``: the recipe as cached here, trained by a cold call),
    kept beside the variants' with its seconds per step."""
    from pyterrier_tot.recipe.expert_training import training_metadata

    out = ROWS / "default.json"
    if out.is_file():
        return json.loads(out.read_text())
    row = training_cost.default_row(ds, index)
    dp = __import__("pyterrier_tot").tuned_pipeline(ds, index, train=False, verbose=False)
    folders = {**dp.recipe["bases"], **dp.recipe["helpers"]}
    meta = {n: training_metadata(f) for n, f in folders.items()}
    row["s_per_step"] = {("mpnet" if n == "dense_ft_mpnet" else "minilm"): round(m["seconds"] / m["steps"], 2)
                         for n, m in meta.items()}
    row["machine"] = _common.machine()
    ROWS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row))
    return row


def birco(ds, index) -> dict:
    """{row name: measures on BIRCO WhatsThatBook dev} of the default's and each measured variant's recipe, saved
    and transferred to BIRCO's catalogue (nothing trained or fitted there); kept in ``ROWS/birco.json``."""
    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import RecipeArtifact

    out_file = ROWS / "birco.json"
    found = json.loads(out_file.read_text()) if out_file.is_file() else {}
    bds = ptt.get_dataset("birco-wtb")
    books, topics, qrels = ptt.BookIndex(bds), bds.get_topics("dev"), bds.get_qrels("dev")
    for name in ["default", *VARIANTS]:
        if name in found or (name != "default" and not (ROWS / f"{name}.json").is_file()):
            continue
        if name == "default":
            dp = ptt.tuned_pipeline(ds, index, train=False, verbose=False)
        else:
            models = request_encoders(ds, index, name)  # trained by `run`: reused
            dp = ptt.tuned_pipeline(ds, index, fine_tuned={"dense_ft_mpnet": models["mpnet"]},
                                    helpers={"dense_ft": models["minilm"]}, train=False, verbose=False)
        folder = WORK / f"saved-{name}"
        if not folder.is_dir():
            dp.save(folder)
        found[name] = training_cost.measured(RecipeArtifact(folder).transfer(books), topics, qrels)
        print(f"BIRCO dev, {name}: objective {found[name]['objective']}, R@5 {found[name]['R@5']}", flush=True)
        out_file.write_text(json.dumps(found))
    return found


def cost(ds, index, steps: int = 8) -> dict:
    """Seconds per step of the default's pair step and of a request step (catalogue softmax), same run, same
    requests, batch 16 at 256 tokens, each model in the default's precision (bf16 autocast for mpnet where the CPU
    has it); and the seconds the default spends encoding the catalogue again after training."""
    from pyterrier_tot.models import native_bf16
    from pyterrier_tot.recipe import BASE_SETTINGS, train_biencoder, train_data, train_request_encoder
    from pyterrier_tot.recipe.expert_training import build_pairs, training_metadata

    topics, qrels = train_data(ds, "rest")
    pairs = build_pairs(topics, qrels, index)
    out = {"steps": steps, "machine": _common.machine(), "native_bf16": native_bf16(),
           "load_average_at_start": [round(x, 1) for x in os.getloadavg()]}
    for model in ("minilm", "mpnet"):
        amp = BASE_SETTINGS[model]["amp"] == "auto" and native_bf16()
        t0 = time.perf_counter()
        index.flex_index(model)  # the frozen catalogue (built once: the zero-shot expert's index)
        encode_s = time.perf_counter() - t0
        pair = train_biencoder(pairs, WORK / "cost" / f"pair-{model}", base_model=model, max_steps=steps,
                               batch_size=16, max_seq_length=256, amp=amp, show_progress_bar=False)
        request = train_request_encoder(topics, qrels, index, model, max_steps=steps, batch_size=16,
                                        max_seq_length=256, amp=amp, reuse=False, show_progress_bar=False,
                                        output_dir=WORK / "cost" / f"request-{model}")
        p, r = training_metadata(pair), training_metadata(request)
        out[model] = {"amp": bool(amp), "pair_s_per_step": round(p["seconds"] / p["steps"], 2),
                      "request_s_per_step": r["seconds_per_step"],
                      "catalogue_encoding_s (0 when it was built before)": round(encode_s, 1)}
        out[model]["speed-up"] = round(out[model]["pair_s_per_step"] / out[model]["request_s_per_step"], 2)
        print(model, out[model], flush=True)
    out["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "cost.json").write_text(json.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["run", "cost", "birco", "render"])
    args = ap.parse_args()
    import pyterrier_tot as ptt

    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    if args.what == "cost":
        found = cost(ds, index)
        rows = [{"model": m, **{k: v for k, v in found[m].items()}} for m in ("minilm", "mpnet")]
        import pandas as pd

        md = [f"# {__doc__.splitlines()[0]}", "", "## Cost of a step (the study itself has not run yet)", "",
              f"Machine: {found['machine']}; {found['steps']} steps of batch 16 at 256 tokens each, same run; "
              f"load average (1, 5, 15 min) {found['load_average_at_start']} at the start and "
              f"{found['load_average_at_end']} at the end (above 2, other jobs shared the two cores: the "
              "seconds are inflated, the ratio less so).", "",
              _common.md_table(pd.DataFrame(rows).astype(object)), "",
              "A pair step encodes 16 requests and their 16 books and back-propagates through both; a request "
              "step encodes the 16 requests and scores them against the stored vectors of every book."]
        _common.write_results(f"{NAME}_cost", found, "\n".join(md))
        return
    if args.what == "birco":
        birco(ds, index)
    default = default_row(ds, index)
    rows, adopted = training_cost.cheapest_passing(
        VARIANTS, lambda name: run_variant(name, ds, index), default,
        lambda name: args.what == "run" or (ROWS / f"{name}.json").is_file())
    render(default, rows, adopted)


def _p_shown(line: dict) -> dict:
    """p-values below .001 shown as "<.001" (rounded, they would read 0.000)."""
    return {k: ("<.001" if k.endswith(" p") and isinstance(v, float) and v < .001 else v) for k, v in line.items()}


def render(default: dict, rows: list, adopted) -> None:
    """results/frozen_catalogue.{json,md}: each variant beside the default (same run), paired p-values."""
    import pandas as pd

    table = []
    for r in [default, *rows]:
        steps = r.get("s_per_step", {})
        line = {"training": r["name"], "mpnet s/step": steps.get("mpnet", ""), "MiniLM s/step": steps.get("minilm", ""),
                "mpnet training s": round(r["train_s"].get("dense_ft_mpnet", r["train_s"].get("mpnet", 0))),
                "MiniLM training s": round(r["train_s"].get("dense_ft", r["train_s"].get("minilm", 0)))}
        line.update(_p_shown(training_cost.split_columns(r, default, "p")))
        line["passes"] = r.get("passes", "(baseline)")
        table.append(line)
    payload = {"rule": next(p for p in __doc__.split("\n\n") if p.startswith("The rule")), "adopted": adopted,
               "margins": [training_cost.MARGIN_OBJECTIVE, training_cost.MARGIN_R5],
               "rows": [{k: v for k, v in r.items() if k not in ("tuning", "validation")} |
                        {s: {k: v for k, v in r[s].items() if k != "per_query_objective"}
                         for s in ("tuning", "validation")} for r in [default, *rows]],
               "machine": _common.machine()}
    untried = [v for v in VARIANTS if v not in {r["name"] for r in rows}]
    m = payload["machine"]
    lines = [f"# {__doc__.splitlines()[0]}", "", f"Machine: {m['cpus']} CPU cores, {m['platform']}, {m['date']}. "
             "Same run: the default's row is "
             "the recipe a whole cold first call trained on this machine (`first_call.py --keep`), each variant's "
             "its two request encoders and the fuser fitted over them.", "",
             _common.md_table(pd.DataFrame(table).astype(object).fillna("")), "",
             (f"Adopted: **{adopted}**." + (f" Not run: {', '.join(untried)} (the rule stops at the first that "
                                            "passes)." if untried else "") if adopted else
              f"Adopted: **none so far**; not run yet: {', '.join(untried)}. The study goes on with the next "
              "variant (`run` measures only the rows still missing)." if untried else
              "Adopted: **none: no variant passes, the default stays**. The cheapest first call at equal quality "
              "is therefore the default's own (`recipe/results/first_call.md`)."), "",
             "p: paired t-test over queries of the objective (the mean of R@1, R@5, R@10, R@20, R@100 and MRR) "
             "against the default. The rule reads the tuning slice only; validation chooses nothing.", "",
             "## The rule", "", payload["rule"]]
    on_birco = json.loads((ROWS / "birco.json").read_text()) if (ROWS / "birco.json").is_file() else {}
    if "default" not in on_birco:
        lines[-3:-3] = ["BIRCO dev: not measured yet (`birco`: about half an hour on two quiet cores, since it "
                        "encodes BIRCO's 2,404 books with four models).", ""]
    else:
        measured = {r["name"]: {"name": r["name"], "birco": on_birco[r["name"]]} for r in [default, *rows]
                    if r["name"] in on_birco}
        base = measured["default"]
        birco_rows = [{"training": n, **_p_shown(training_cost.split_columns(r, base, "p", splits=("birco",)))}
                      for n, r in measured.items()]
        payload["birco"] = [{"training": n, **{k: v for k, v in on_birco[n].items() if k != "per_query_objective"}}
                            for n in measured]
        lines[-3:-3] = ["## BIRCO WhatsThatBook dev (57 requests, another catalogue; chooses nothing)", "",
                        "Each recipe saved and transferred (`RecipeArtifact.transfer`): models and weights as "
                        "fitted on Reddit-TOMT, nothing fitted on BIRCO; a request encoder searches BIRCO's vectors "
                        "of its book model, encoded there once.", "",
                        _common.md_table(pd.DataFrame(birco_rows).astype(object).fillna("")), ""]
    _common.write_results(NAME, payload, "\n".join(lines))


if __name__ == "__main__":
    main()
