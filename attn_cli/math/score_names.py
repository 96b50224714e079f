"""The head scores' names and the thresholds of a head's label, with no torch: reading a corpus store
(`attn heads show`) and drawing a HeadsReport need them, and neither loads a model. The formulas are in
math/head_scores.py.
"""

from __future__ import annotations

SCORES = (
    "previous_token",
    "duplicate_token",
    "induction",
    "first_token",
    "last_token",
    "punctuation",
    "self",
    "broad",
    "sink",
    "retrieval",
)
SHARES = SCORES[:7]  # the "mul" weight shares; broad, sink and retrieval are last
BROAD, SINK, RETRIEVAL = 7, 8, 9
# The short names the views print (the store's histograms, the top heads' table), which --score also takes
SHORT_NAMES = {
    "previous_token": "previous",
    "duplicate_token": "duplicate",
    "first_token": "first",
    "last_token": "last",
}
SINK_EPSILON = 0.3  # a key holding more than this of a row's weight (Gu et al. 2024)
LABEL_THRESHOLD = 0.5  # a head is labelled by a weight share only when more than half its weight goes there
BROAD_THRESHOLD = 0.85  # … else "broad" when its rows are this close to uniform
MIXED = "mixed"

# Scores a cross-attention head (target queries × source keys) does not have, and why. Each pairs query i
# with a key by its position in the query's own sequence (i − 1, i itself, an earlier copy of token i), and
# a cross head's keys are another sequence. The others read the keys only, so they stay defined: first_token
# (the source's first token), last_token (the source's separators, EOS), punctuation (the source's
# punctuation), broad (a row's entropy over the source keys it may attend) and sink (a source key most rows
# put more than ε on). retrieval needs a probe's needle, which a pair has not.
CROSS_UNDEFINED = {
    "previous_token": "cross-attention: query i is a target token, key i − 1 a source token, not the one before it",
    "duplicate_token": "cross-attention: the keys are source tokens, not earlier tokens of the query's target",
    "induction": "cross-attention: the keys are source tokens, not tokens after an earlier copy in the target",
    "self": "cross-attention: no token is both a query (target) and a key (source)",
}
# … and what an image's heads do not have: its patches carry no token ids (nothing repeats, so no duplicate
# or induction target), and no patch is a separator or punctuation. previous_token (the patch before in raster
# order), first_token ([CLS]), self, broad and sink read positions of one square matrix and stay defined.
IMAGE_UNDEFINED = {
    "duplicate_token": "an image: patches have no token ids, so none repeats another",
    "induction": "an image: patches have no token ids, so none repeats another",
    "last_token": "an image has no separator token ([SEP]/EOS)",
    "punctuation": "an image has no punctuation",
}


def canonical_score(name: str) -> str:
    """A score as a view prints it ("duplicate", "duplicate token", "Duplicate-Token") -> its name in SCORES
    ("duplicate_token"); a name that is none of them comes back as written, for the caller to refuse."""
    key = "_".join(name.strip().lower().replace("-", " ").replace("_", " ").split())
    for full, short in SHORT_NAMES.items():
        if key == short:
            return full
    return key if key in SCORES else name
