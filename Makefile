# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench tuner clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# Plans ResNet-50 (batch 32) on 16 V100s over 10GbE with every strategy; writes out/.
run: $(STAMP)
	$(BIN)/commsched plan --out out

test: $(STAMP)
	$(BIN)/python -m pytest

# Speed benchmarks (results go in BENCHMARKS.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_speed.py
	$(BIN)/python benchmarks/mgwfbp_vs_optimal.py

# The NCCL tuner plugin (C, system compiler, no CUDA): out/nccl-tuner/libcommsched_nccl_tuner.so
tuner: $(STAMP)
	$(BIN)/commsched nccl-tuner --out out/nccl-tuner

clean:
	rm -rf $(VENV) out
