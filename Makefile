# The two entry points of the README: `make demo` and `make test`. Both set themselves up.
VENV ?= .venv
STAMP := $(VENV)/.bootstrapped
BIN := $(VENV)/bin

.PHONY: demo test lint unit integration bench clean

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $@

demo: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check opsctl training tests bench
	$(BIN)/mypy

test: lint
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest

unit: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest tests/unit

bench: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash bench/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
