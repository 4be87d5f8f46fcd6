# sgpatch: every target sets up what it needs (a venv in .venv with the project installed).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SGPATCH := $(VENV)/bin/sgpatch
STACK  ?=
PLATFORM ?=
PYTEST_ARGS ?=
# one worker more than cores: while one waits on a subprocess, a timeout or a lock, the cores stay busy
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))

.PHONY: help venv venv-run test lint patch wheel bench fuzz reliability-table reference clean

help:
	@echo "make test    - run the test suite (creates .venv with the test and lint extras)"
	@echo "make patch   - fetch pinned SGLang -> apply the series -> verify (default stack, or STACK=...)"
	@echo "make wheel   - make patch, then build and verify the patched wheel(s) into dist/ (PLATFORM=TAG: one wheel-only tag)"
	@echo "make lint    - ruff and mypy --strict"
	@echo "make bench   - benchmarks against their shell floors, on sgpatch installed as a user installs it"
	@echo "make reference - regenerate docs/reference.md's synopsis and option tables from the command line"
	@echo "make fuzz    - the fuzz and engine-vs-git tests with 25x the examples make test runs (about 20 minutes)"
	@echo "make reliability-table - run the fault/kill/hostile-input tests, regenerate docs/reliability.md"

# Two markers, one venv: the main job (make patch / make wheel) installs sgpatch with its runtime
# dependencies only; make test / lint / bench / fuzz add the test and lint extras.
# compat: a plain path entry; the default editable finder costs every sgpatch process ~10 ms of start-up
$(VENV)/.installed-run: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e . -c constraints.txt --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,lint]' -c constraints.txt --config-settings editable_mode=compat
	touch $@ $(VENV)/.installed-run

venv-run: $(VENV)/.installed-run

venv: $(VENV)/.installed

# Where the tests' temporary files go: a tmpfs when the machine has one with room (/dev/shm, 12 GB free or more),
# else the system's temporary directory.  The suite makes thousands of files (checkouts, venvs, wheels): on a
# disk, creating and writing them was a fifth of its CPU time (about 1,500 CPU-seconds against 1,250 on tmpfs,
# this repository on 2 cores).  A passing run deletes them; a failing one leaves them for a look.  One directory per
# clone and user, so two clones' runs never meet; `make test TEST_TMP=` keeps everything on the disk.
TEST_TMP ?= $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] \
  && [ "$$(df -Pk $$d 2>/dev/null | awk 'NR==2 {print $$4}')" -ge 12000000 ] 2>/dev/null \
  && echo $$d/sgpatch-tests-$$(id -u)-$$(printf %s "$(CURDIR)" | cksum | cut -d' ' -f1))

# --dist loadfile: a test file runs on one worker, so its module fixtures (wheel builds, venvs) are made once
test: venv
ifeq ($(TEST_TMP),)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)
else
	@rm -rf $(TEST_TMP) && mkdir -p $(TEST_TMP)/tmp && echo "make test: temporary files in $(TEST_TMP)"
	TMPDIR=$(TEST_TMP)/tmp $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=20 \
	  --basetemp $(TEST_TMP)/base $(PYTEST_ARGS) && rm -rf $(TEST_TMP)
endif

lint: venv
	$(VENV)/bin/ruff check sgpatch tests bench tools
	$(VENV)/bin/ruff format --check sgpatch tests bench tools
	$(VENV)/bin/mypy

patch: venv-run
	$(SGPATCH) fetch $(STACK)
	$(SGPATCH) apply $(STACK)
	$(SGPATCH) verify $(STACK)
	@echo "patched checkout: $$($(SGPATCH) stacks --json | $(PY) -c 'import json,sys; d=json.load(sys.stdin); print(".sgpatch/checkouts/" + ("$(STACK)" or d["default_stack"]))')"

wheel: patch
	@mkdir -p dist
	$(SGPATCH) build $(STACK) $(if $(PLATFORM),--platform $(PLATFORM)) --out dist --json > .sgpatch/build.json \
	  || { echo "make wheel: sgpatch build failed (the reason is above; its report: .sgpatch/build.json)" >&2; exit 1; }
	$(PY) -c 'import json; print("\n".join(w["wheel"] for w in json.load(open(".sgpatch/build.json"))["wheels"]))' \
	  | while read -r whl; do $(SGPATCH) verify $(STACK) --wheel "$$whl" || exit 1; done

fuzz: venv
	SGPATCH_FUZZ_SCALE=25 $(PY) -m pytest tests/test_fuzz.py tests/test_engine.py -q $(PYTEST_ARGS)

reliability-table: venv
	$(PY) tools/reliability_table.py --output docs/reliability.md --readme docs/security.md

reference: venv
	$(PY) tools/reference.py

bench: venv
	$(PY) bench/verify.py
	$(PY) bench/build.py
	$(PY) bench/preflight.py
	$(PY) bench/fleet.py

clean:
	rm -rf .sgpatch dist build
