"""Pure scoring functions (entropies, clustering, SelfCheck, SBC, FEWL, PHR); imports nothing of halluscope."""

from halluscope.scoring.selfcheck import UnigramScore, scgp_score, supported_value, unigram_scores
from halluscope.scoring.semantic_entropy import discrete_semantic_entropy, greedy_cluster

__all__ = [
    "UnigramScore",
    "discrete_semantic_entropy",
    "greedy_cluster",
    "scgp_score",
    "supported_value",
    "unigram_scores",
]
