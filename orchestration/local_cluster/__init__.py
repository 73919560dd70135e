"""A real cluster on loopback for `make cluster-demo` and the cluster tests: PostgreSQL 15, SeaweedFS (S3 and
its Iceberg REST catalog) and a Ray cluster, each started in a private temp dir and stopped by its PID."""
