"""One LangGraph StateGraph per method, built from small node functions; ``stages`` holds the stages
several methods compose. Each module has ``build(...)`` (the compiled graph, mountable in a host graph
through its private input and output schemas), ``detect(...)`` (one item to a DetectionResult) and
``METHOD``, its contract (``method.Method``) that the detector and the command line read."""
