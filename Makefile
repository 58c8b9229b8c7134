# The README's two commands. Both create .venv if missing and install into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium
export PYTHONHASHSEED := 0

.PHONY: lab test setup browser fonts i18n-tools i18n zh-TW lab-zh-TW

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

test: $(STAMP) browser fonts i18n-tools
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests
	CHUNKPREFILL_I18N_STRICT=1 $(PY) -m pytest --nbval --nbval-cell-timeout=300 -p no:cacheprovider notebooks/
