"""Pure scoring functions (entropies, clustering, SelfCheck, SBC, CLUE, FEWL, PHR); imports nothing of halluscope."""

from halluscope.scoring.clue import (
    assignment_counts,
    concept_labels,
    concept_uncertainties,
    concept_uncertainty,
    entropy_diversity,
    harmonic_mean_diversity,
)
from halluscope.scoring.fewl import (
    expertise_score,
    expertise_weights,
    fewl_score,
    fewl_terms,
    laziness_penalty,
    variant_scores,
)
from halluscope.scoring.selfcheck import (
    UnigramScore,
    scgp_score,
    supported_probability,
    supported_value,
    unigram_scores,
)
from halluscope.scoring.semantic_entropy import (
    CLUSTER_RULES,
    ClusterRule,
    cluster_logprobs,
    cluster_steps,
    discrete_semantic_entropy,
    greedy_cluster,
    length_normalised,
    naive_predictive_entropy,
    predictive_entropy_rao,
    question_entropy,
    unanswered,
)

__all__ = [
    "UnigramScore",
    "assignment_counts",
    "concept_labels",
    "concept_uncertainties",
    "concept_uncertainty",
    "entropy_diversity",
    "expertise_score",
    "expertise_weights",
    "fewl_score",
    "fewl_terms",
    "harmonic_mean_diversity",
    "laziness_penalty",
    "cluster_logprobs",
    "cluster_steps",
    "discrete_semantic_entropy",
    "CLUSTER_RULES",
    "ClusterRule",
    "greedy_cluster",
    "length_normalised",
    "naive_predictive_entropy",
    "predictive_entropy_rao",
    "question_entropy",
    "scgp_score",
    "supported_probability",
    "supported_value",
    "unanswered",
    "unigram_scores",
    "variant_scores",
]
