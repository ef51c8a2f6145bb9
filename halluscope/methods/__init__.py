"""One module per method, each the whole method: its ``Inputs`` and ``Options`` (declared once), its
LangGraph graph (``build``), its ``prepare`` and ``run``, and its ``METHOD`` contract, which the
registry (``halluscope.runtime.registry``) finds. Beside them, and not a method, ``sampling``: what
several methods draw and compare (SelfCheck's comparison passages, sampled answers, their clusters).
What runs the methods (the contract, shared options, nodes, Studio) is ``halluscope.runtime``."""
