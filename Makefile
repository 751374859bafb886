# Two entry points: `make demo` (install, then run the main job) and
# `make test` (install, fetch the real 2.6.0 test tree, run the tests);
# `make docs` builds the documentation site into site/.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: install demo test docs fuzz bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch is pinned and installed before the package so pip never resolves a CUDA build.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,docs]'
	touch $@

install: $(VENV)/.installed

# The main job: where F.conv2d's kernels are for CPU and CUDA, then the whole
# stack from nn.Conv2d to the cuDNN call, read from the real 2.6.0 source tree.
demo: install
	$(BIN)/kernelmap where torch.nn.functional.conv2d --device cpu
	$(BIN)/kernelmap where torch.nn.functional.conv2d --device cuda
	$(BIN)/kernelmap source add "$$(scripts/fetch-test-tree)" >/dev/null
	$(BIN)/kernelmap index
	$(BIN)/kernelmap stack torch.nn.Conv2d --device cuda

test: install
	scripts/fetch-test-tree >/dev/null
	scripts/fetch-test-tree 1.13 >/dev/null
	scripts/install-browser
	$(BIN)/python -m pytest -q

# The documentation site: warnings (a broken link or anchor, a page not in nav,
# a command mkdocs-click cannot load) are errors.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The property tests of tests/fuzz with many more examples than `make test` gives them.
fuzz: install
	scripts/fetch-test-tree >/dev/null
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/fuzz

bench: install
	for b in benches/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache site
