# The README's two commands. Both create .venv if missing and install into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0

.PHONY: lab test setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests
	$(PY) -m pytest --nbval --nbval-cell-timeout=300 -p no:cacheprovider notebooks/
