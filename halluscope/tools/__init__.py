"""LangChain tools and guard subgraphs for agent workflows (added by the agent-workflows issue)."""
