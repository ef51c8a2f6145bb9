"""What a team tunes on its own labelled answers or a benchmark's labels, above the benchmarks it runs:
``calibrate`` (a calibration fitted on labels, or cross-validated on a user's answers), ``choose``
(candidate methods and stacks compared held out and costed) and ``probe_fit`` (a linear probe's
examples, answered and graded or sampled, read through the gateway, and the probe fitted)."""
