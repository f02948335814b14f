"""The SUnion (Borealis's, its stable half): a fragment's inputs merged bucket by bucket.

``python -m medusa.sunion --config FILE`` runs one; see ``service`` for how it works
and ``buckets`` for the rules it follows.
"""

from medusa.sunion.config import SUnionConfig, SUnionInput, dump_config, load_config
from medusa.sunion.service import (
    INPUT_HEADER,
    POSITIONS_HEADER,
    SUnion,
    SUnionError,
    SUnionFencedError,
)

__all__ = [
    "INPUT_HEADER",
    "POSITIONS_HEADER",
    "SUnion",
    "SUnionConfig",
    "SUnionError",
    "SUnionFencedError",
    "SUnionInput",
    "dump_config",
    "load_config",
]
