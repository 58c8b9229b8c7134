# The README's two commands. Both create .venv if missing and install into it.
# (A third, `make site`, builds the course website; `make test` builds and checks it too.)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# `make test` also builds the package as a wheel and installs it alone into a second venv:
# the notebooks are tested there, from a folder outside the repository, as a user who
# installed the package would run them.
WHEEL_VENV ?= .venv-wheel
WPY := $(WHEEL_VENV)/bin/python
WHEEL_DIR := build/wheel
CHROMIUM ?= /usr/bin/chromium
NBVAL := -m pytest --nbval --nbval-cell-timeout=300 -p no:cacheprovider
export PYTHONHASHSEED := 0

SITE_REPO_URL ?=
.PHONY: lab test setup browser wheel site npm fonts i18n-tools i18n zh-TW lab-zh-TW gpu

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev,site]'
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

# The package as a user gets it: a wheel (pip wheel .), installed with its dependencies into
# a venv of its own; the wheel itself is reinstalled on every run, so it is never stale.
wheel: $(STAMP)
	rm -rf $(WHEEL_DIR)
	$(PY) -m pip wheel --no-deps --quiet . -w $(WHEEL_DIR)
	test -x $(WPY) || python3 -m venv $(WHEEL_VENV)
	test -f $(WHEEL_VENV)/.deps || { $(WPY) -m pip install --upgrade pip && \
	  $(WPY) -m pip install torch==2.13.0 && touch $(WHEEL_VENV)/.deps; }
	$(WPY) -m pip install --quiet "$$(ls $(WHEEL_DIR)/chunkprefill-*.whl)[dev]"
	$(WPY) -m pip install --quiet --force-reinstall --no-deps $(WHEEL_DIR)/chunkprefill-*.whl

# The site's pages load scripts and fonts vendored from npm packages (site/vendor.toml).
npm:
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; \
	  else echo "npm missing: run 'sudo apt-get install npm'" >&2; exit 1; fi; }

# The course website into build/site/, offline, from the notebooks as stored (nothing is
# executed). SITE_REPO_URL=https://... points the source links at that repository.
site: $(STAMP) npm
	$(PY) site/build.py --repo-url '$(SITE_REPO_URL)'

# zh-TW figures draw with Noto Sans CJK TC (Taiwan glyph forms); installed like chromium.
fonts:
	@test -f /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk; \
	  else echo "fonts-noto-cjk missing: run 'sudo apt-get install fonts-noto-cjk'" >&2; exit 1; fi; }

# GNU gettext's msgmerge merges the catalogs (fuzzy + previous msgid, exactly as gettext does).
i18n-tools:
	@command -v msgmerge >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext; \
	  else echo "gettext missing: run 'sudo apt-get install gettext'" >&2; exit 1; fi; }

# The zh-TW edition (i18n/README.md): extract + merge the catalogs, then render + execute.
i18n: $(STAMP) i18n-tools
	$(PY) -m dev.i18n update

zh-TW: $(STAMP) fonts
	$(PY) -m dev.i18n build

lab-zh-TW: $(STAMP) fonts
	$(VENV)/bin/jupyter lab notebooks/zh-TW/ $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

test: $(STAMP) browser fonts i18n-tools wheel site
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests
	nb=$$(mktemp -d) && cp -r notebooks/. $$nb/ && cd $$nb && \
	  $(abspath $(WPY)) -c "import chunkprefill, sys; assert 'site-packages' in chunkprefill.__file__ and not chunkprefill.__file__.startswith('$(CURDIR)/chunkprefill/'), chunkprefill.__file__" && \
	  CHUNKPREFILL_I18N_STRICT=1 $(abspath $(WPY)) $(NBVAL) .

# The GPU half (benchmarks/run_gpu.py): GPU tests, kernel and sweep benchmarks and the GPU
# notebooks, in at most 10 minutes, results under artifacts/gpu/. Without a GPU: one line, exit 0.
# The notebooks are found by topic, whatever their number; GPU_PY=python3 uses a Python that
# already has a CUDA torch (the venv's torch is the CPU build).
GPU_NOTEBOOKS ?= notebooks/*_the_attention_kernel.ipynb notebooks/*_live_gpu_timing.ipynb
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu:
	@$(GPU_PY) benchmarks/run_gpu.py --out artifacts/gpu $(GPU_NOTEBOOKS)
