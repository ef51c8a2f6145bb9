"""Datasets, paper protocols, metrics and reports."""

from halluscope.evaluators.datasets import data_root, dataset_dir, list_datasets

__all__ = ["data_root", "dataset_dir", "list_datasets"]
