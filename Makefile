# Two commands for a new machine (Python 3.11, Node 20):
#   make lab   install everything, open JupyterLab on the demo notebook
#   make test  install everything, run lint and the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
JLPM := PATH=$(CURDIR)/$(VENV)/bin:$$PATH jlpm
UI_TESTS := labextension/ui-tests
PY_SOURCES := jupyter_gpu_pause tests benchmarks $(UI_TESTS)/jupyter_server_test_config.py \
	docs/conf.py docs/_ext
# What the server brings into a kernel (server/kernels/bundle.py): it runs on the kernel's
# Python, 3.9 or newer, so lint holds it to 3.9's language and library.
KERNEL_SOURCES := jupyter_gpu_pause/kernel jupyter_gpu_pause/store jupyter_gpu_pause/__init__.py \
	jupyter_gpu_pause/version.py jupyter_gpu_pause/units.py
# The prebuilt labextension and what it is built from (unit tests excluded).
LABEXT_BUILT := jupyter_gpu_pause/labextension/package.json
HUB_PROXY := tests/hub_proxy/node_modules/.bin/configurable-http-proxy
LABEXT_SOURCES := $(shell find labextension/src labextension/style labextension/schema \
	-type f -not -path '*/__tests__/*' 2>/dev/null)

GATEWAY_VENV := .venv-gateway
GATEWAY_VERSION := 3.3.0
PROJECT_VENV := .venv-project

.PHONY: install lab test lint pytest jest ui-test chromium bench clean gateway-venv project-venv \
	docs

install: $(VENV)/.installed

# torch is pinned first: a bare "torch" requirement would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml labextension/package.json labextension/yarn.lock
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 numpy
	$(PIP) install -q -e ".[test,lab,s3]"
	touch $@

lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=demo $(ROOT_FLAG) \
		--GpuPauseApp.store_url=$(CURDIR)/demo/.store

lint: install
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)
	$(VENV)/bin/mypy
	$(VENV)/bin/vermin -q --no-tips --violations -t=3.9- $(KERNEL_SOURCES)
	cd labextension && $(JLPM) lint:check

# Two workers: the suite mostly waits on kernels and servers (0.7 of a core on average alone),
# so two halve its time on a 2-core machine. Each file stays on one worker (--dist loadfile):
# a file's module-scoped servers are shared by its tests. PYTEST_WORKERS=0 runs it in one.
PYTEST_WORKERS ?= 2
pytest: install $(HUB_PROXY) gateway-venv project-venv
	$(PY) -m pytest -ra -n $(PYTEST_WORKERS) --dist loadfile

# configurable-http-proxy from npm, for tests/test_hub.py's real JupyterHub
$(HUB_PROXY): tests/hub_proxy/package.json tests/hub_proxy/package-lock.json
	cd tests/hub_proxy && npm ci --no-audit --no-fund

# Jupyter Enterprise Gateway for tests/test_gateway.py, in its own venv (it pins older jupyter
# packages than ours); ~30 s. The tests make it the same way when it is missing.
gateway-venv: $(GATEWAY_VENV)/.installed

$(GATEWAY_VENV)/.installed:
	python3 -m venv $(GATEWAY_VENV)
	$(GATEWAY_VENV)/bin/pip install -q jupyter_enterprise_gateway==$(GATEWAY_VERSION)
	touch $@

# A researcher's project environment for the tests' kernels (tests/venvs.py): ipykernel and
# numpy, and nothing of ours; the server brings its agent. The tests make it the same way when
# it is missing.
project-venv: $(PROJECT_VENV)/.installed

$(PROJECT_VENV)/.installed:
	python3 -m venv $(PROJECT_VENV)
	$(PROJECT_VENV)/bin/pip install -q ipykernel numpy
	touch $@

jest: install
	cd labextension && $(JLPM) test

# pip builds the labextension only when it is missing; rebuild it when a source is newer, since
# the UI tests serve this build. Order-only on install: a fresh install needs no second build.
$(LABEXT_BUILT): $(LABEXT_SOURCES) labextension/package.json labextension/tsconfig.json | install
	cd labextension && $(JLPM) install && $(JLPM) build:prod

# Galata in the system Chromium (Playwright never downloads a browser); Playwright starts the
# test server itself. Screenshots land in $(UI_TESTS)/test-results and artifacts, the HTML
# report in playwright-report. One spec: make ui-test UI_TEST_ARGS=tests/smoke.spec.ts
ui-test: install $(LABEXT_BUILT) chromium
	cd $(UI_TESTS) && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(JLPM) install
	cd $(UI_TESTS) && JUPYTER=$(CURDIR)/$(VENV)/bin/jupyter $(JLPM) playwright test $(UI_TEST_ARGS)

# The system Chromium the UI tests drive: installed from apt when missing and we are root,
# else a clear message (Playwright's own browser downloads do not work here).
chromium:
	@command -v chromium >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
		else echo "The UI tests need Chromium: sudo apt-get install chromium" >&2; exit 1; fi; }

test: lint docs jest pytest ui-test

# The documentation site in docs/_build/html: Sphinx + MyST + the pydata theme. Warnings are
# errors (-W) and every reference must resolve (-n): a broken link fails the build. The
# reference pages are generated from the code as it builds (docs/_ext/gpupause_reference.py).
docs: install $(VENV)/.docs-installed
	$(VENV)/bin/sphinx-build -W --keep-going -n -b html docs docs/_build/html

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PIP) install -q -e ".[docs]"
	touch $@

bench: install
	$(PY) benchmarks/bench_pause_resume.py

clean:
	rm -rf $(VENV) $(GATEWAY_VENV) $(PROJECT_VENV) labextension/node_modules labextension/lib \
		jupyter_gpu_pause/labextension $(UI_TESTS)/node_modules $(UI_TESTS)/test-results \
		$(UI_TESTS)/playwright-report $(UI_TESTS)/artifacts $(UI_TESTS)/.state \
		tests/hub_proxy/node_modules docs/_build docs/reference/_generated
