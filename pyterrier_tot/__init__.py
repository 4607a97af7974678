"""pyterrier_tot: tip-of-the-tongue known-item retrieval stages for PyTerrier."""
__version__ = "0.1.0"

from pyterrier_tot.clues import CLUE_FIELDS, CLUE_COLUMNS, YEAR_COLUMN, clue_column
from pyterrier_tot.normalise import Normalise, normalise_scores
from pyterrier_tot.books import Book, BOOK_FIELDS, parse_year
from pyterrier_tot.datasets import get_dataset, list_datasets
from pyterrier_tot.retrieval import BookIndex, tokenise_query
from pyterrier_tot.models import resolve_model, load_biencoder, ModelUnavailableError
from pyterrier_tot.evaluation import TOT_MEASURES, SHORT_MEASURES, tot_experiment, write_trec_run, read_trec_run
from pyterrier_tot.cover_ranker import CoverRanker, CoverIndex, ClipModel
from pyterrier_tot.clip_training import finetune_clip, CoverClipTrainer
