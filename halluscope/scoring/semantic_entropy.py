"""Semantic entropy (Farquhar et al., Nature 2024): greedy clustering by bidirectional entailment,
the discrete entropy of the cluster sizes, and, where answers come with log-probs, the likelihood
estimators of the official code (length-normalised answer log-likelihoods, cluster log-probabilities
by normalised logsumexp, ``predictive_entropy_rao``; the naive predictive entropy as the baseline).
Pure functions; the judge is passed in."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import Literal, TypeVar

T = TypeVar("T")

# the estimates of one run, in each result's unit evidence
ESTIMATES = ("semantic_entropy", "n_clusters", "likelihood_semantic_entropy", "naive_entropy")
ClusterRule = Literal["paper", "official"]
CLUSTER_RULES: tuple[ClusterRule, ...] = ("paper", "official")


def greedy_cluster(
    items: Sequence[T], same_meaning: Callable[[T, T], bool], rule: ClusterRule = "paper"
) -> list[list[int]]:
    """Indexes of items grouped greedily by ``same_meaning`` (see ``cluster_steps`` for the rules)."""
    steps = cluster_steps(len(items), rule)
    verdict: bool | None = None
    while True:
        try:
            i, j = steps.send(verdict)
        except StopIteration as done:
            return done.value
        verdict = same_meaning(items[i], items[j])


def cluster_steps(n_items: int, rule: ClusterRule = "paper") -> Generator[tuple[int, int], bool, list[list[int]]]:
    """Greedy clustering of ``n_items`` items as steps: it yields the (i, j) index pairs it must know
    the equivalence of, one at a time, is sent each answer, and returns the clusters' indexes; a
    caller decides how to judge a pair (``greedy_cluster`` calls a function, an async graph node
    awaits a judge).

    ``paper`` (the default, the paper's Algorithm 1): each new item is compared with the first member
    of each existing cluster in order and joins the FIRST equivalent one, else opens a new cluster.
    ``official`` (the official code's ``get_semantic_ids``): each item not yet placed opens a cluster
    and is compared with every later item, placed or not; a later item equivalent to it moves there,
    so the LAST matching cluster wins. Both take equivalence as transitive and agree when the judge
    is; with a non-transitive judge they can differ."""
    if rule not in CLUSTER_RULES:
        raise ValueError(f"unknown cluster rule {rule!r}; known: {', '.join(CLUSTER_RULES)}")
    if rule == "official":
        ids = [-1] * n_items
        next_id = 0
        for i in range(n_items):
            if ids[i] != -1:
                continue
            ids[i] = next_id
            for j in range(i + 1, n_items):
                if (yield (i, j)):
                    ids[j] = next_id
            next_id += 1
        return [[i for i, c in enumerate(ids) if c == cid] for cid in range(next_id)]  # a leader never moves
    clusters: list[list[int]] = []
    for i in range(n_items):
        for cluster in clusters:
            if (yield (cluster[0], i)):
                cluster.append(i)
                break
        else:
            clusters.append([i])
    return clusters


def discrete_semantic_entropy(cluster_sizes: Sequence[int], base: float = math.e) -> float:
    """-sum p log p over clusters with p = size / total (natural log unless ``base`` is given;
    the walkthrough's worked example uses base 10)."""
    if not cluster_sizes or any(s <= 0 for s in cluster_sizes):
        raise ValueError(f"cluster sizes must be positive and non-empty, got {list(cluster_sizes)}")
    total = sum(cluster_sizes)
    entropy = -sum((s / total) * math.log(s / total) for s in cluster_sizes) / math.log(base)
    return entropy + 0.0  # turns -0.0 (one cluster) into 0.0


def length_normalised(token_logprobs: Sequence[float]) -> float:
    """An answer's log-likelihood as the official code uses it: the mean of its token log-probs."""
    if not token_logprobs:
        raise ValueError("an answer needs at least one token log-prob")
    return sum(token_logprobs) / len(token_logprobs)


def cluster_logprobs(cluster_ids: Sequence[int], log_likelihoods: Sequence[float]) -> list[float]:
    """log p(cluster) per cluster id in sorted order: logsumexp of its members' log-likelihoods minus
    logsumexp over all answers (the official ``logsumexp_by_id``, ``sum_normalized``)."""
    if len(cluster_ids) != len(log_likelihoods) or not cluster_ids:
        raise ValueError(f"need one log-likelihood per answer, got {len(log_likelihoods)} for {len(cluster_ids)}")
    total = _logsumexp(log_likelihoods)
    if total == -math.inf:
        raise ValueError("every answer has log-likelihood -inf: the clusters' probabilities are undefined")
    return [
        _logsumexp([ll for c, ll in zip(cluster_ids, log_likelihoods, strict=True) if c == cid]) - total
        for cid in sorted(set(cluster_ids))
    ]


def predictive_entropy_rao(log_probs: Sequence[float]) -> float:
    """-sum p log p over the clusters' log-probabilities: the likelihood semantic entropy (a cluster
    of probability 0, log-prob -inf, adds 0: the limit of p log p)."""
    return -sum(math.exp(lp) * lp for lp in log_probs if lp != -math.inf) + 0.0


def naive_predictive_entropy(log_likelihoods: Sequence[float]) -> float:
    """The baseline that ignores meaning: minus the mean answer log-likelihood (Monte Carlo)."""
    if not log_likelihoods:
        raise ValueError("need at least one answer log-likelihood")
    return -sum(log_likelihoods) / len(log_likelihoods)


UNANSWERED_MARKERS = ("not available", "not provided", "unknown", "unclear")


def unanswered(answers: Sequence[str]) -> bool:
    """The official long-form code's refusal rule: a question is unanswerable when at least
    len(answers) // 2 of its answers contain one of UNANSWERED_MARKERS (case-insensitive)."""
    if not answers:
        raise ValueError("need at least one answer")
    said = sum(any(marker in a.lower() for marker in UNANSWERED_MARKERS) for a in answers)
    return said >= len(answers) // 2


def question_entropy(answers: Sequence[str], cluster_sizes: Sequence[int], base: float = math.e) -> float:
    """One generated question's score in paragraph semantic entropy: the discrete entropy of its
    answers' clusters, or the maximum log(number of answers) when the answers say it is unanswerable."""
    if sum(cluster_sizes) != len(answers):
        raise ValueError(f"clusters hold {sum(cluster_sizes)} answers, not {len(answers)}")
    if unanswered(answers):
        return math.log(len(answers)) / math.log(base)
    return discrete_semantic_entropy(cluster_sizes, base=base)


def claim_entropy(question_entropies: Sequence[float], regenerated: int, base: float = math.e) -> float:
    """A claim's score: the mean entropy of its questions; with no question to ask, the most a question
    can have (each of its 1 + ``regenerated`` answers in a cluster of its own)."""
    if not question_entropies:
        return math.log(1 + regenerated) / math.log(base)
    return math.fsum(question_entropies) / len(question_entropies)


def _logsumexp(values: Sequence[float]) -> float:
    """log sum exp; -inf when every value is -inf (probability 0), not -inf - -inf = nan."""
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))
