# The two entry points of the README: `make demo` and `make test`. Both set themselves up.
VENV ?= .venv
STAMP := $(VENV)/.bootstrapped
BIN := $(VENV)/bin

# The bootstrap installs without byte-compiling (scripts/bootstrap.sh): every process must be able
# to keep the bytecode it compiles, or each one recompiles torch's and transformers' modules.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test suite check lint unit integration bench lock pictures clean reference

$(STAMP): pyproject.toml locks/cpu.txt scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $@

demo: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check opsctl training tests bench scripts dashboards environments
	$(BIN)/mypy
	$(BIN)/mypy scripts/lock.py scripts/extract_dcgm_fields.py

# Each test module (every lab module together) runs on one worker: one worker per core for the
# modules that compute, and one more for the modules that mostly wait on daemons (tests/conftest.py,
# WAITING_MODULES; docs/benchmarks.md, "Test suite").
# Lint runs beside the suite, not before it: mypy holds one core for half a minute on a cold cache,
# which the suite's workers use meanwhile; either failing fails `make test`.
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 lint suite
suite: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest -n auto

# The fast tier to run while working: lint, types and the unit tests (no daemons) on every core.
# `make test` is the whole suite, the one CI runs.
check: lint
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest -n auto tests/unit

# The configuration reference, from the code (tests/unit/foundation/test_config_reference.py
# fails while it is stale).
reference: $(STAMP)
	$(BIN)/opsctl config reference --output docs/reference/opsctl-toml.md
	$(BIN)/opsctl config reference --job --output docs/reference/job-toml.md

unit: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest tests/unit

bench: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash bench/run.sh

# Resolve pyproject again and rewrite locks/cpu.txt (on this CPU platform) and locks/cuda.txt (the
# GPU nodes' runtime, from PyPI); commit both. Bootstrap, CI, the demo and the runtime role install
# from them.
# Not behind the bootstrap: that fails while the locks disagree with a changed pyproject.
lock:
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q --constraint locks/cpu.txt packaging
	$(BIN)/python scripts/lock.py refresh

# Render the pictures' Graphviz sources (docs/pictures/*.dot) to the SVGs committed beside them.
# Needs Graphviz's `dot` (not installed by bootstrap: the tests read the committed SVGs, and
# tests/unit/foundation/test_pictures.py fails while an SVG lacks a label its source has).
pictures:
	@command -v dot >/dev/null || { echo "make pictures needs Graphviz's dot (apt-get install graphviz)" >&2; exit 1; }
	for f in docs/pictures/*.dot; do dot -Tsvg "$$f" -o "$${f%.dot}.svg" || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
