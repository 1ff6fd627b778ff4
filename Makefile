# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench tuner clean browser gpu-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# Plans ResNet-50 (batch 32) on 16 V100s over 10GbE with every strategy; writes out/.
run: $(STAMP)
	$(BIN)/commsched plan --out out

test: $(STAMP) browser
	$(BIN)/python -m pytest

# Debian's headless Chromium for the report's browser test (tests/integration/test_report_browser.py),
# installed only where missing and only as root; without it that test skips and says why.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; } || \
	echo "note: chromium and chromium-driver are not installed; the browser test of the HTML report will be skipped"

# The maintained benchmarks that no test runs (about 4 minutes on 2 cores; results in BENCHMARKS.md,
# every entry point and what runs it in benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_speed.py
	$(BIN)/python benchmarks/bench_speed.py --resources --resource-models vgg16,googlenet,vit_b_16,bert_base,inception_v3,densenet161,densenet201
	$(BIN)/python benchmarks/mgwfbp_vs_optimal.py
	$(BIN)/python benchmarks/optimal_under_contention.py --cases 5000 --max-tensors 12
	$(BIN)/python benchmarks/resources.py
	$(BIN)/python benchmarks/rs_model_configs.py

# The NCCL tuner plugin (C, system compiler, no CUDA): out/nccl-tuner/libcommsched_nccl_tuner.so
tuner: $(STAMP)
	$(BIN)/commsched nccl-tuner --out out/nccl-tuner

# The checks that need a GPU (issue 31), with the machine's own python3 (torch, numpy, scipy, click,
# rich, matplotlib, pytest, hypothesis): no venv, no installs. Results (results.json, summary.md and at
# most 6 artifacts) go to $(OUT): `make gpu-check OUT=dir`, else $OUT from the environment, else
# out/gpu-check. Under 8 minutes (each step has its own time limit); without CUDA, the dry path.
# GPU_CHECK_ARGS go to the command, e.g. `make gpu-check GPU_CHECK_ARGS="--steps profiles"`.
OUT ?= out/gpu-check
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=src python3 -m commsched.gpu_check $(GPU_CHECK_ARGS) "$(OUT)"

clean:
	rm -rf $(VENV) out
