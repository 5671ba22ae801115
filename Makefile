# Quickstart: `make demo` then `make test`. Everything runs in .venv with the pinned CPU build of torch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# 2.13.0 is the build available offline here; the package itself accepts a wide torch range.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-fast slow-list lint venv clean bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet hatchling
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	cd examples && ../$(PY) demo.py --steps 20
	$(VENV)/bin/torchfl doctor

# The whole suite (CI runs this). Bounded: each test by pytest-timeout (600 s, pyproject.toml), the whole run
# by --session-timeout, so a hang fails CI with a message instead of stalling it. The suite took 10 minutes on
# a quiet 2-core machine and 29 minutes on a slower, loaded one (2026-12-02); the bound (75 minutes) leaves
# such a machine room to finish green, and the install room inside CI's 90.
TEST_SESSION_TIMEOUT ?= 4500
# Two pytest-xdist processes: 12 min 8 s on a quiet 2-core machine against 20 min 34 s serially (2026-12-05,
# 2921 passed either way); TEST_WORKERS=0 runs it in one process, in file order.
TEST_WORKERS ?= 2
test: venv
	$(PY) -m pytest -n $(TEST_WORKERS) --session-timeout=$(TEST_SESSION_TIMEOUT)

# The edit-test loop: everything but the tests marked slow (by hand: multi-process runs, real compiles,
# subprocess launches; by measurement: tests/slow_measured.txt, 1 s of CPU time or more), on TEST_FAST_WORKERS
# processes (pytest-xdist), under 2 minutes on a quiet 2-core machine. The 4 s budget is CPU time with one
# torch thread per worker (tests/fast_budget.py), so a loaded machine cannot turn a green run red.
TEST_FAST_WORKERS ?= 2
test-fast: venv
	OMP_NUM_THREADS=1 TORCH_FL_TEST_FAST_LIMIT=4 $(PY) -m pytest -m "not slow" -n $(TEST_FAST_WORKERS) --session-timeout=$(TEST_SESSION_TIMEOUT)

# Re-measure the slow list (CPU time, so a busy machine measures as a quiet one): after adding tests, or when
# tests/test_env_suite_bounds.py says the list is stale.
slow-list: venv
	$(PY) scripts/measure_slow_tests.py --workers $(TEST_FAST_WORKERS)

lint: venv
	$(VENV)/bin/ruff check .

bench: venv
	$(PY) benchmarks/import_time.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
