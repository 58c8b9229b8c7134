# The README's two commands. Both create .venv if missing and install into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium
export PYTHONHASHSEED := 0

.PHONY: lab test setup browser gpu

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

# Containers run as root, and JupyterLab refuses root without --allow-root: pass it only then.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/ $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# The browser test drives Debian's chromium (never a downloaded browser build).
browser:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "chromium missing: run 'sudo apt-get install chromium'" >&2; exit 1; fi; }

test: $(STAMP) browser
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests
	$(PY) -m pytest --nbval --nbval-cell-timeout=300 -p no:cacheprovider notebooks/

# The GPU half (benchmarks/run_gpu.py): GPU tests, kernel and sweep benchmarks and the GPU
# notebooks, in at most 10 minutes, results under artifacts/gpu/. Without a GPU: one line, exit 0.
# The notebooks are found by topic, whatever their number; GPU_PY=python3 uses a Python that
# already has a CUDA torch (the venv's torch is the CPU build).
GPU_NOTEBOOKS ?= notebooks/*_the_attention_kernel.ipynb notebooks/*_live_gpu_timing.ipynb
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu:
	@$(GPU_PY) benchmarks/run_gpu.py --out artifacts/gpu $(GPU_NOTEBOOKS)
