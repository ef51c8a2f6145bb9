"""One module per method, each the whole method: its ``Inputs`` and ``Options`` (declared once), its
LangGraph graph (``build``), its ``prepare`` and ``run``, and its ``METHOD`` contract, which the
registry finds. Beside them, shared and not methods: ``method`` (the contract), ``options`` (fields
several methods declare alike), ``stages`` (stages several graphs compose) and ``studio`` (every
method's graph for LangGraph Studio)."""
