"""The papers' benchmark protocols: datasets, one runner with a typed BenchResult, metrics, reports.

(The LangSmith-style evaluators, which score one example inside someone else's experiment, are
``halluscope.evaluators``.)"""

from halluscope.bench.datasets import data_root, dataset_dir, list_datasets

__all__ = ["data_root", "dataset_dir", "list_datasets"]
