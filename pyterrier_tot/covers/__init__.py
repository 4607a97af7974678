"""Book covers: a CLIP model wrapper, cover images, the cover index (an artifact), the cover ranker and CLIP
fine-tuning (one concern per module)."""
from pyterrier_tot.covers.clip_model import LONG_CLUE_MODES, TINY_CLIP_CONFIG, ClipModel
from pyterrier_tot.covers.clip_training import ClipCheckpoint, CoverClipTrainer, finetune_clip, retrieval_accuracy
from pyterrier_tot.covers.cover_index import CoverIndex
from pyterrier_tot.covers.cover_ranker import COVER_COLUMN, MISSING_COVER_MODES, CoverRanker
from pyterrier_tot.covers.images import blank_cover, load_cover

__all__ = ["ClipModel", "CoverIndex", "CoverRanker", "blank_cover", "load_cover", "ClipCheckpoint",
           "CoverClipTrainer", "finetune_clip", "retrieval_accuracy", "COVER_COLUMN", "TINY_CLIP_CONFIG",
           "LONG_CLUE_MODES", "MISSING_COVER_MODES"]
