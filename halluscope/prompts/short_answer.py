"""A short answer to a question, as Farquhar et al. sample it: the prompt, its token budget, and the
entailment prompt an LLM judge clusters such answers with. Semantic entropy, the probe, the QA benches
and the probe's fit draw the same answers, so they read this, not one another's modules."""

ANSWER = "semantic_entropy.answer"
ANSWER_MAX_TOKENS = 64  # one brief sentence
ENTAILMENT = "semantic_entropy.entailment"  # the prompt an LLM entailment judge asks
