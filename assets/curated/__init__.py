"""Curated documents: extraction, language, quality, PII/secrets, perplexity and exact-dedup decisions."""
