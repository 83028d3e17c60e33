# Two commands for a new machine (Python 3.11, Node 20):
#   make lab   install everything, open JupyterLab on the demo notebook
#   make test  install everything, run lint and the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: install lab test lint pytest jest bench clean

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
	$(VENV)/bin/ruff check jupyter_gpu_pause tests benchmarks
	$(VENV)/bin/ruff format --check jupyter_gpu_pause tests benchmarks
	cd labextension && PATH=$(CURDIR)/$(VENV)/bin:$$PATH jlpm lint:check

pytest: install
	$(PY) -m pytest -ra

jest: install
	cd labextension && PATH=$(CURDIR)/$(VENV)/bin:$$PATH jlpm test

test: lint jest pytest

bench: install
	$(PY) benchmarks/bench_pause_resume.py

clean:
	rm -rf $(VENV) labextension/node_modules labextension/lib jupyter_gpu_pause/labextension
