"""pyterrier_tot: tip-of-the-tongue known-item retrieval stages for PyTerrier."""
__version__ = "0.1.0"

from pyterrier_tot.clues import CLUE_FIELDS, CLUE_COLUMNS, YEAR_COLUMN, clue_column
from pyterrier_tot.normalise import Normalise, normalise_scores
