"""The head scores' names and the thresholds of a head's label, with no torch: reading a corpus store
(`attn heads show`) and drawing a HeadsReport need them, and neither loads a model. The formulas are in
math/head_scores.py.
"""

from __future__ import annotations

SCORES = ("previous_token", "duplicate_token", "induction", "first_token", "last_token", "punctuation", "self",
          "broad", "sink", "retrieval")
SHARES = SCORES[:7]  # the "mul" weight shares; broad, sink and retrieval are last
BROAD, SINK, RETRIEVAL = 7, 8, 9
SINK_EPSILON = 0.3  # a key holding more than this of a row's weight (Gu et al. 2024)
LABEL_THRESHOLD = 0.5  # a head is labelled by a weight share only when more than half its weight goes there
BROAD_THRESHOLD = 0.85  # … else "broad" when its rows are this close to uniform
MIXED = "mixed"
