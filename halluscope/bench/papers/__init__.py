"""One paper's benchmark protocol a module: its datasets, plan, metrics and report."""
