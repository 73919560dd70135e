"""tokenlake.loader: deterministic, resumable training input from a published run view.

Imports no Dagster: training code does `import loader` with only torch, pyarrow and pyiceberg installed.
"""
