"""The package's private plumbing, shared by every family: paths, locks and column checks (:mod:`.util`), the one
on-disk format (:mod:`.artifact`), cache keys from settings (:mod:`.cache_key`) and reprs that read as code
(:mod:`.reprs`). Nothing here is public API."""
