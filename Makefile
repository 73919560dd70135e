# Two commands do all the set-up on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TOKENLAKE_HOME ?= $(CURDIR)/.tokenlake

.PHONY: install demo cluster-demo test test-slow lint format bench-ingest clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	# torch first, pinned: an unpinned resolver would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet 'torch==2.13.0'
	$(BIN)/pip install --quiet -e '.[test,cluster]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m orchestration.demo

# the same steps on PostgreSQL 15 + SeaweedFS (S3) + a 2-node Ray cluster, all on loopback, stopped by PID
cluster-demo: $(STAMP)
	$(BIN)/python -m orchestration.local_cluster.demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The slow suite waits on servers, browsers and subprocesses much of the time: two workers, one test file
# each at a time (a file's servers and fixtures stay on one worker), took it from 27 to 17 minutes on 2 cores.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q -n 2 --dist loadfile --durations=15

bench-ingest: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf .tokenlake
