"""One LangGraph StateGraph per method, built from small node functions (added by the method issues)."""
