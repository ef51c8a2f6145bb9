"""What runs a method, and is not one: the contract every method declares (``contract``), the registry
that finds them (``registry``), the fields several declare alike (``options``), graph nodes written
once as steps and a graph run to its end (``nodes``), what a served request may choose (``serving``)
and every method's graph for LangGraph Studio (``studio``)."""
