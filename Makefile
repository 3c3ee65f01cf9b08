# Two commands do all the set-up on a fresh machine:  make demo  |  make test
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup scatter demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

setup: $(STAMP)

# torch_scatter has no wheel on PyPI: build it against the installed torch (pip caches the wheel)
$(VENV)/.scatter: $(STAMP)
	$(BIN)/pip install --quiet --no-build-isolation torch-scatter
	touch $@

scatter: $(VENV)/.scatter

demo: setup
	$(BIN)/solution demo

test: scatter
	WANDB_MODE=disabled SOLUTION_REQUIRE_SCATTER=1 $(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/data_bench.py

clean:
	rm -rf $(VENV) data/synthetic runs submissions/*.csv submissions/*.md submissions/*.npz
