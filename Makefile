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

.PHONY: env run bench test lane-first lane-notebooks lane-unit lane-side test-full test-unit test-notebooks notebooks-inplace clean

env:
	@bash env/setup_env.sh

# Notebook 07 (the benchmark) runs at its SMOKE setting here; `make bench` runs it in full.
run: env
	$(PY) -m scripts.lab.run_notebooks --profile $(PROFILE)

bench: env
	$(PY) -m scripts.lab.run_notebooks --profile $(PROFILE) --only 07 --full

# The unit tests and every notebook under nbval (outputs compared with the committed ones after
# sanitising; notebooks 07 and 08 at their SMOKE setting), then the values the check cells recorded.
# They run in two lanes side by side (make -j2): alone, each part leaves a core idle for long
# stretches (a vLLM engine's start imports vLLM in three processes in turn, one core busy), and
# side by side they keep both cores busy (on two cores: about 16 minutes instead of 21). The lanes
# share only the CPUs: servers take free ports of 127.0.0.1, each notebook starts a Ray cluster of
# its own, and the unit tests build in temporary folders.
#   notebooks lane: 00 01 (model, engine settings), then 02-07 in order (each reads what the ones
#                   before it built; 05 and 07 fill and serve the same Serve repository)
#   side lane:      the unit tests, then notebook 08 once 00 and 01 are done
# Each line of output names its lane (the notebooks report every cell as it passes); with make -k
# a failed lane does not stop the other one.
NB_FIRST := 00 01
NB_REST := 02 03 04 05 06 07
NB_SIDE := 08
lane = set -o pipefail; $(1) 2>&1 | sed -u 's/^/[$(2)] /'
nbval = $(PY) -m pytest -v $(NBVAL) $$($(PY) -m scripts.lab.run_notebooks --nbval-targets build/smoke --only $(1))

test: env
	@$(MAKE) --no-print-directory -j2 -k lane-notebooks lane-side
	$(PY) -m pytest -q tests/notebooks --deselect tests/notebooks/test_parameters.py

lane-first:
	@$(call lane,$(call nbval,$(NB_FIRST)),notebooks $(NB_FIRST))

lane-notebooks: lane-first
	@$(call lane,$(call nbval,$(NB_REST)),notebooks $(NB_REST))

lane-unit:
	@$(call lane,$(PY) -m pytest -q tests/unit,unit tests)

lane-side: lane-first lane-unit
	@$(call lane,$(call nbval,$(NB_SIDE)),notebooks $(NB_SIDE))

test-unit: env
	$(PY) -m pytest -q tests/unit

test-notebooks: env
	$(PY) -m pytest -q $(NBVAL) $$($(PY) -m scripts.lab.run_notebooks --nbval-targets build/smoke)
	$(PY) -m pytest -q tests/notebooks --deselect tests/notebooks/test_parameters.py

# Everything `make test` runs, then the long runs: notebook 06 again with other parameters, and
# the Serve application under failure and load (tests/full; TUTORIAL_SOAK_REQUESTS sets the soak).
test-full: test
	$(PY) -m pytest -q tests/notebooks/test_parameters.py
	$(PY) -m pytest -q -s tests/full

# Maintainers: re-execute the committed notebooks top to bottom and keep their outputs.
notebooks-inplace: env
	$(PY) -m scripts.lab.run_notebooks --inplace

clean:
	rm -rf build
