# make demo  : install (core) and convert sample_data/ into demo_out/
# make test  : install (core + dev + tf + torch) and run every test
# make test-slow : the slow tests (SIGKILL/SIGINT trials, conversions under a memory cap): minutes
# make bench : the benchmark table (ratios against peers in the same run)
# make lint  : ruff check + format check
# make fuzz  : mutate seed inputs and datasets for 3 minutes; crashing inputs go to fuzz/crashes/
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CORE   := $(VENV)/.core-installed
FULL   := $(VENV)/.full-installed

.PHONY: demo test test-slow bench fuzz lint format clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(CORE): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	touch $@

$(FULL): pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q torch==2.13.0  # first: megatron-core (dev) needs torch, and must not pull a CUDA build
	$(PIP) install -q -e '.[dev,all]'
	touch $(CORE) $@

demo: $(CORE)
	rm -rf demo_out && mkdir -p demo_out
	$(VENV)/bin/lovecraft convert sample_data/data.csv -o demo_out/csv_parquet --to parquet --column-type zip=string
	$(VENV)/bin/lovecraft convert sample_data/features.npy sample_data/labels.npy -o demo_out/npy_hdf5 --to hdf5 --dtype float16
	$(VENV)/bin/lovecraft convert sample_data/data.csv.gz -o demo_out/csv_tfrecord --to tfrecord --compression gzip
	$(VENV)/bin/lovecraft convert sample_data/corpus.txt.zst -o demo_out/text_memmap --to memmap
	$(VENV)/bin/lovecraft shard sample_data/data.csv -o demo_out/shards --to parquet --num-shards 4 --shuffle --seed 7 --column-type zip=string
	@echo "demo outputs are in demo_out/ (each directory has a _manifest.json)"

test: $(FULL)
	$(PY) -m pytest -q

test-slow: $(FULL)
	$(PY) -m pytest -q -m slow

fuzz: $(FULL)
	$(PY) fuzz/fuzz_readers.py --minutes 3

bench: $(FULL)
	$(PY) bench/lovecraft_bench.py
	$(PY) bench/loader_bench.py
	$(PY) bench/mixed_loader_bench.py
	$(PY) bench/resume_bench.py
	$(PY) bench/peer_loaders_bench.py

lint: $(FULL)
	$(VENV)/bin/ruff check lovecraft_convert tests bench fuzz sample_data
	$(VENV)/bin/ruff format --check lovecraft_convert tests bench fuzz sample_data

format: $(FULL)
	$(VENV)/bin/ruff check --fix lovecraft_convert tests bench fuzz sample_data
	$(VENV)/bin/ruff format lovecraft_convert tests bench fuzz sample_data

clean:
	rm -rf $(VENV) demo_out .pytest_cache .hypothesis
