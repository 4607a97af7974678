"""Book covers: a CLIP model wrapper, the cover index (an artifact), the cover ranker and CLIP fine-tuning."""
from pyterrier_tot.covers.cover_ranker import ClipModel, CoverIndex, CoverRanker, blank_cover, load_cover
from pyterrier_tot.covers.clip_training import ClipCheckpoint, CoverClipTrainer, finetune_clip

__all__ = ["ClipModel", "CoverIndex", "CoverRanker", "blank_cover", "load_cover", "ClipCheckpoint",
           "CoverClipTrainer", "finetune_clip"]
