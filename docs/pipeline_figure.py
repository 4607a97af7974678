"""Draws docs/_static/pipeline.png, the figure of how the ToT stages compose (run: python docs/pipeline_figure.py)."""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

# (column, row, title, lines, colour); LLM-backed stages are orange, trained ones green
BOXES = [
    (0, 1, "topics", ["qid, query", "(long, hedged)"], "#e8e8e8"),
    (1, 1, "query stages", ["HedgeRemover", "NegationPenalty"], "#cfe2f3"),
    (2, 2, "clues", ["RuleClueExtractor", "ClueDecomposer (LLM)"], "#fce5cd"),
    (2, 0, "title naming", ["TitleNamer (LLM)"], "#fce5cd"),
    (3, 1, "candidates", ["BM25 (PISA)", "dense (pyterrier-dr)", "fine-tuned base"], "#d9ead3"),
    (4, 1, "experts", ["FieldExpert: title, plot", "DateExpert", "CoverRanker (CLIP)"], "#d9ead3"),
    (5, 1, "fusion", ["WeightedFuser", "(fitted on train)", "or RRF / ** features"], "#d9ead3"),
    (6, 1, "rerank", ["DenseReranker", "ListwiseReranker (LLM)"], "#cfe2f3"),
    (7, 1, "run", ["write_trec_run", "validate_run"], "#e8e8e8"),
]
# (from, to, curvature): the title namer's candidates join at the fusion, passing below the experts
EDGES = [(0, 1, 0), (1, 2, 0), (1, 4, 0), (2, 4, 0), (1, 3, 0), (4, 5, 0), (5, 6, 0), (3, 6, 0.25), (6, 7, 0),
         (7, 8, 0)]


def draw(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(13, 3.6))
    w, h, dx, dy = 1.35, 0.95, 1.6, 1.15
    centres = []
    for col, row, title, lines, colour in BOXES:
        x, y = col * dx, row * dy
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=colour, ec="#444"))
        ax.text(x, y + h / 2 - 0.17, title, ha="center", va="center", fontsize=9, fontweight="bold")
        ax.text(x, y - 0.08, "\n".join(lines), ha="center", va="center", fontsize=7.2)
        centres.append((x, y))
    for a, b, rad in EDGES:
        (x0, y0), (x1, y1) = centres[a], centres[b]
        end = (x1 - w / 2, y1) if not rad else (x1, y1 - h / 2)  # a curved edge enters from below
        ax.add_patch(FancyArrowPatch((x0 + w / 2, y0), end, arrowstyle="-|>", mutation_scale=12,
                                     color="#444", connectionstyle=f"arc3,rad={rad}"))
    ax.set_xlim(-0.8, 7 * dx + 0.8)
    ax.set_ylim(-0.7, 2 * dy + 0.7)
    ax.axis("off")
    ax.set_title("pyterrier_tot: every box is a pt.Transformer; compose with >>, +, **, %", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    draw(Path(__file__).resolve().parent / "_static" / "pipeline.png")
