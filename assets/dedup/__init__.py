"""Near-duplicate detection: MinHash signatures, LSH bands, crawl-ordered clustering."""
