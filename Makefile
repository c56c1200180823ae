# Two commands for readers: `make run` executes every notebook, `make test` tests everything.
# Both build or refresh the virtual environment first (env/setup_env.sh, idempotent).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python3
PROFILE ?= cpu
# Triton's Python-backend stub finds its packages through the first python3 on PATH: the venv's.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# The stub starts in the C locale; vLLM/torch need UTF-8 (notebook 04 explains; the vllm backend sets it).
export LC_ALL := C.UTF-8
export PYTHONUNBUFFERED := 1
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 900

.PHONY: env run bench test test-full test-unit test-servers test-notebooks test-contract test-rehearsal test-render chromium notebooks-inplace clean

env:
	@bash env/setup_env.sh

# Notebooks with a SMOKE parameter (05, 07, 08) run at that setting here; `make bench` runs 07 in full.
run: env
	$(PY) -m scripts.lab.run_notebooks --profile $(PROFILE)

bench: env
	$(PY) -m scripts.lab.run_notebooks --profile $(PROFILE) --only 07 --full

# Unit tests, then every notebook under nbval (outputs compared with the committed ones after
# sanitising; notebooks 05, 07 and 08 at their SMOKE setting), then the values the notebooks' check cells recorded.
test: env test-unit test-notebooks

# Two workers (pytest-xdist): most unit-test time is real servers starting, mostly one process
# importing at a time, so two side by side take little longer than one. --dist loadscope keeps a
# module's tests on one worker, so a module's server fixture starts once. UNIT_WORKERS=0: one process.
# The OpenAPI fuzzer runs after, in a process of its own: under pytest 9 schemathesis gives the
# tests it makes for each route one node id, and xdist would run only one of them.
UNIT_WORKERS ?= 2
FUZZ := tests/unit/serve/test_openapi.py
# Tests marked `servers` start a real Ray cluster or vLLM server on a path the notebooks below also run
# (pyproject.toml lists why): `make test-servers` runs them, `.ci/run` and `make test-full` too.
test-unit: env
	$(PY) -m pytest -q -n $(UNIT_WORKERS) --dist loadscope tests/unit --ignore=$(FUZZ) -m "not servers"
	$(PY) -m pytest -q -p no:xdist $(FUZZ)

test-servers: env
	$(PY) -m pytest -q -n $(UNIT_WORKERS) --dist loadscope tests/unit --ignore=$(FUZZ) -m servers

# nbval in stages: 00-03 one after the other, then 04 05 | 07 08 in two lanes side by side, then 06
# (scripts/lab/nbval_lanes.py says why that is safe); NBVAL_LANES=1: every notebook one after the other.
NBVAL_LANES ?= 2
test-notebooks: env
	$(PY) -m scripts.lab.nbval_lanes --lanes $(NBVAL_LANES) --smoke-dir build/smoke -- $(NBVAL)
	$(PY) -m pytest -q tests/notebooks --deselect tests/notebooks/test_parameters.py

# The GPU-free part of the gpu-trtllm path under the NGC image's own package versions
# (env/contract/gpu-trtllm.txt: transformers 4.47 ..., installed over the venv; scripts/lab/contract.py).
test-contract: env
	$(PY) -m scripts.lab.contract gpu-trtllm

# A GPU profile's Serve settings executed here: notebooks 05 and 06 run to their check cells on the cpu
# profile's engine with every Serve key of $(REHEARSE) (replica CPUs and counts, autoscaling delays and
# windows, request limits; scripts.profiles.rehearsal), so numbers that do not fit together fail by
# execution, not on the GPU. Needs notebooks 00-03's build (make test or make run first); copies and
# recorded values go to build/executed/$(REHEARSE)@cpu.
REHEARSE ?= gpu-trtllm
test-rehearsal: env
	$(PY) -m scripts.lab.run_notebooks --profile $(REHEARSE)@cpu --only 05 06

# JupyterLab in headless Chromium (tests/render, Playwright): every committed notebook opened as it is
# (a render error, a traceback the file does not have, a console error or a missing plot fails;
# screenshots go to build/screenshots/), then notebooks 00-03 run with Run All in a lab started as the
# README says. The browser is Debian's chromium, installed here when missing (root, like
# env/setup_env.sh installs prometheus); Playwright never downloads one. .ci/run runs it as an
# ordinary user (env/as_reader.sh).
CHROMIUM_INSTALL := apt-get install -y --no-install-recommends chromium
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	    echo "test-render: Debian's chromium is not installed; as root run: apt-get update && $(CHROMIUM_INSTALL)"; \
	    exit 1; \
	  fi; \
	  echo "test-render: installing Debian's chromium with apt-get"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(CHROMIUM_INSTALL) >/dev/null 2>&1 || { apt-get update -qq && $(CHROMIUM_INSTALL) >/dev/null; } || \
	    { echo "test-render: installing chromium failed"; exit 1; }; \
	fi

test-render: env chromium
	$(PY) -m pytest -q -s tests/render

# Everything `make test` runs, then the long runs: the gpu-trtllm contract, the notebooks rendered in
# JupyterLab, notebook 06 again with other parameters, and the Serve application under failure and
# load (tests/full; TUTORIAL_SOAK_REQUESTS sets the soak).
test-full: test test-servers test-contract test-rehearsal test-render
	$(PY) -m pytest -q tests/notebooks/test_parameters.py
	$(PY) -m pytest -q -s tests/full

# Maintainers: re-execute the committed notebooks top to bottom and keep their outputs.
notebooks-inplace: env
	$(PY) -m scripts.lab.run_notebooks --inplace

clean:
	rm -rf build
