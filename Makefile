# make demo  : install (core) and convert sample_data/ into demo_out/
# make test  : install (core + dev + tf + torch) and run every test
# make test-slow : the slow tests (SIGKILL/SIGINT trials, conversions under a memory cap): minutes
# make bench : every benchmark (ratios against peers in the same run) into bench/RESULTS.md
# make docs  : build the documentation site into site/ and serve it on 127.0.0.1:8000 (docs-build: build only)
# make lint  : ruff check + format check
# make fuzz  : mutate seed inputs and datasets for 3 minutes; crashing inputs go to fuzz/crashes/
# make .venv-peers : the peers' own venv (webdataset, MosaicML Streaming, litdata, datatrove), which
#              tests/peers and the benchmarks call as a subprocess (docs/design/peers.md); test and bench build it
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CORE   := $(VENV)/.core-installed
FULL   := $(VENV)/.full-installed
DOCS   := $(VENV)/.docs-installed
PEERS  := .venv-peers
PEERS_LOCK  := tests/peers/requirements.txt tests/peers/constraints.txt
PEERS_STAMP := $(PEERS)/.installed
PEERS_FAILED := .venv-peers.failed
PEERS_LOG := .venv-peers.log

.PHONY: demo test test-slow bench docs docs-build fuzz lint format clean $(PEERS)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(CORE): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	touch $@

$(FULL): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q torch==2.13.0  # first: megatron-core (dev) needs torch, and must not pull a CUDA build
	$(PIP) install -q -e '.[dev,all]'
	touch $(CORE) $(DOCS) $@

$(DOCS): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e '.[docs]'
	touch $(CORE) $@

# Peers whose packages would change .venv's (a CUDA torch through torchvision, datatrove's own pins)
# live in a venv of their own, rebuilt from scratch when the lock changes: every version pinned in
# tests/peers/constraints.txt; mosaicml-streaming without its declared dependencies (see
# tests/peers/requirements.txt). Several GB (torch's CUDA libraries), taken from the local wheels.
# When it cannot be installed (seen in CI: the disk full), the partial venv is removed and why is
# kept in $(PEERS_FAILED): the tests that need a peer skip, quoting it, and the others run; the
# next `make test` tries again.
$(PEERS_STAMP): $(PEERS_LOCK)
	rm -rf $(PEERS) $(PEERS_FAILED)
	@if $(PYTHON) -m venv $(PEERS) \
		&& $(PEERS)/bin/pip install -q -r tests/peers/requirements.txt -c tests/peers/constraints.txt 2> $(PEERS_LOG) \
		&& $(PEERS)/bin/pip install -q --no-deps -c tests/peers/constraints.txt mosaicml-streaming 2>> $(PEERS_LOG); then \
		touch $@; rm -f $(PEERS_LOG); \
	else \
		rm -rf $(PEERS); \
		{ grep -v 'is ignored' $(PEERS_LOG) | grep -v '^ *$$' | tail -n 3; df -h . | tail -n 1; } > $(PEERS_FAILED); \
		echo "make: the peers' venv ($(PEERS)) could not be installed; the tests that need a peer skip:"; \
		cat $(PEERS_FAILED); \
	fi

$(PEERS): $(PEERS_STAMP)

demo: $(CORE)
	rm -rf demo_out && mkdir -p demo_out
	$(VENV)/bin/lovecraft convert sample_data/data.csv -o demo_out/csv_parquet --to parquet --column-type zip=string
	$(VENV)/bin/lovecraft convert sample_data/features.npy sample_data/labels.npy -o demo_out/npy_hdf5 --to hdf5 --dtype float16
	$(VENV)/bin/lovecraft convert sample_data/data.csv.gz -o demo_out/csv_tfrecord --to tfrecord --compression gzip
	$(VENV)/bin/lovecraft convert sample_data/corpus.txt.zst -o demo_out/text_memmap --to memmap
	$(VENV)/bin/lovecraft shard sample_data/data.csv -o demo_out/shards --to parquet --num-shards 4 --shuffle --seed 7 --column-type zip=string
	@echo "demo outputs are in demo_out/ (each directory has a _manifest.json)"

test: $(FULL) $(PEERS_STAMP)
	$(PY) -m pytest -q

test-slow: $(FULL) $(PEERS_STAMP)
	$(PY) -m pytest -q -m slow

fuzz: $(FULL)
	$(PY) fuzz/fuzz_readers.py --minutes 3

bench: $(FULL) $(PEERS_STAMP)
	$(PY) bench/results.py

DOCS_ADDR ?= 127.0.0.1:8000

docs-build: $(DOCS)
	$(VENV)/bin/mkdocs build --strict

docs: docs-build
	$(VENV)/bin/mkdocs serve --dev-addr $(DOCS_ADDR)

lint: $(FULL)
	$(VENV)/bin/ruff check lovecraft_convert tests bench fuzz sample_data
	$(VENV)/bin/ruff format --check lovecraft_convert tests bench fuzz sample_data

format: $(FULL)
	$(VENV)/bin/ruff check --fix lovecraft_convert tests bench fuzz sample_data
	$(VENV)/bin/ruff format lovecraft_convert tests bench fuzz sample_data

clean:
	rm -rf $(VENV) $(PEERS) demo_out out site .pytest_cache .hypothesis
