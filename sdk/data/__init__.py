"""Datasets: the seeded synthetic corpus (``qsa.data.synth``) and readers of the published
layouts (VoiceBank+DEMAND, DNS-Challenge, plain folders) as lazily loaded noisy/clean pairs.
"""

from .readers import CropDataset, Pair, PairSet, parse_data_spec

__all__ = ["CropDataset", "Pair", "PairSet", "parse_data_spec"]
