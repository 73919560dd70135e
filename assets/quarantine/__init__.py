"""Evaluation quarantine: benchmark items, n-gram and near-match indexes that find them in documents."""
