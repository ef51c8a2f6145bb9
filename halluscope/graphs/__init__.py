"""One LangGraph StateGraph per method, built from small node functions; ``stages`` holds the stages
several methods compose. Each module has ``build(...)`` (the compiled graph, mountable in a host graph
through its private input and output schemas) and ``detect(...)`` (one item to a DetectionResult)."""
