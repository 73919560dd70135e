"""Governance: deletion requests propagated through the asset graph, proof of erasure, provenance queries."""
