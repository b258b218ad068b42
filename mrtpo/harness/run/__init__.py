"""What a run writes into its directory and reads back.

files.py (writing without following links; the JSONL logs), lock.py (one run per directory),
checkpoints.py (atomic save, exact resume), completions.py (the completions log's records),
trackers.py (TensorBoard, W&B, Trackio), heldout.py (the held-out before/after file),
trained.py (a finished run read back as a loadable model), export.py (a merged checkpoint).
"""
