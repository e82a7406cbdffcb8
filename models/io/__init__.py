"""Checkpoint I/O: raise-eval's own .pt format and importers for weights trained elsewhere (.npz, MATLAB .mat)."""

from raise_eval.models.io.checkpoints import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint, save_npz

__all__ = ["Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint", "save_npz"]
