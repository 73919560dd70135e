"""Raw evidence: WARC records with origin, collection time, licence basis and deletion key."""
