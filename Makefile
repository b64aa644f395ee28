# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv on first use and installs the project with what it needs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REAL := $(VENV)/.real-parts
COMPILED := $(VENV)/.compiled

.PHONY: demo test lint typecheck unit bench clean real-parts system-parts sanitize

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,fast,glass,ray,otel,resume]'
	touch $(STAMP) $(COMPILED)

# The compiled build of the relay's hot path (Cython, from the *_py modules and their
# *_c.pxd; built in place by the editable install): built again when a source changes, so
# no test runs against an older build of it.
$(COMPILED): $(STAMP) setup.py $(wildcard src/steadystream/*/*_py.py src/steadystream/*/*_c.pxd)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(COMPILED)

demo: $(STAMP) $(COMPILED)
	$(BIN)/steadystream demo

test: lint typecheck unit sanitize

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples setup.py
	$(BIN)/ruff format --check src tests benchmarks examples setup.py

typecheck: $(STAMP)
	$(BIN)/mypy

# The whole suite with a coverage report. The floor is the suite's figure when the report
# was added (issue 12); raise it as coverage grows, never lower it. Import cycles are a test
# (tests/test_import_cycles.py), so they fail `make test` too.
COVERAGE_FLOOR := 95.0

# The relay's tests (tests/stamped, tests/gateway, tests/protocol) run on both of its builds,
# the Python source and the compiled one (the ``build`` fixture, tests/conftest.py).
# The suite is spread over the cores by pytest-xdist (many tests wait on servers, so a worker
# more than the cores still gains; worksteal evens out the few long ones). TEST_WORKERS=0
# runs it in one process. The few tests that hold real gaps to a few milliseconds (marked
# serial: a loaded machine defers loopback delivery) run after the rest, alone.
TEST_WORKERS ?= 4
unit: $(STAMP) $(COMPILED) $(REAL) $(LLAMA_SERVER)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal -m "not serial" --cov --cov-report=
	$(BIN)/pytest -m serial -q --cov --cov-append --cov-fail-under=$(COVERAGE_FLOOR)

# The real parts of the integration tests (tests/integration, docs/engines.md): llama.cpp's
# server through llama-cpp-python with a small model from PyPI, and Debian's nginx and
# Prometheus. pip builds llama.cpp from source the first time (about 5 minutes on two cores)
# and keeps the wheel in its cache, so a fresh clone on the same machine installs it in
# seconds; the stamp makes a second `make test` in the same tree skip this step.
real-parts: $(REAL)

$(REAL): $(STAMP) pyproject.toml constraints.txt
	$(MAKE) --no-print-directory system-parts
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/python -m pip install --quiet \
		-c constraints.txt -e '.[real]'
	$(MAKE) --no-print-directory llama-server
	touch $(REAL)

# llama.cpp's own server (llama-server), which serves /v1/responses and /v1/messages besides
# chat: built with CMake from the llama.cpp sources that llama-cpp-python's sdist carries
# (the version constraints.txt pins), once per machine, into the user's cache (about 10
# minutes on two cores). tests/support/real_parts.py finds it there, or where
# STEADYSTREAM_LLAMA_SERVER says.
LLAMA_VERSION := $(shell sed -n 's/^llama_cpp_python==//p' constraints.txt)
LLAMA_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/steadystream/llama-server-$(LLAMA_VERSION)
LLAMA_SERVER := $(LLAMA_CACHE)/llama-server
.PHONY: llama-server
llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): | $(STAMP)
	rm -rf $(LLAMA_CACHE)/work && mkdir -p $(LLAMA_CACHE)/work
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: \
		llama-cpp-python==$(LLAMA_VERSION) -d $(LLAMA_CACHE)/work
	tar xzf $(LLAMA_CACHE)/work/llama_cpp_python-$(LLAMA_VERSION).tar.gz -C $(LLAMA_CACHE)/work
	cmake -S $(LLAMA_CACHE)/work/llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp \
		-B $(LLAMA_CACHE)/work/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
		-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF > $(LLAMA_CACHE)/work/cmake.log
	cmake --build $(LLAMA_CACHE)/work/build --target llama-server -j$$(nproc) \
		> $(LLAMA_CACHE)/work/build.log
	cp $(LLAMA_CACHE)/work/build/bin/llama-server $(LLAMA_SERVER).part
	mv $(LLAMA_SERVER).part $(LLAMA_SERVER)
	rm -rf $(LLAMA_CACHE)/work

# Peers' tools, each in its own virtual environment (their pins are not ours), created once
# per machine in the user's cache as NAME-VERSION: exactly that version of the PyPI package
# NAME. The integration tests run them against the lab and import what they write;
# tests/support/peers.py finds them there, or where STEADYSTREAM_<NAME> says. A peer more is
# one more word in PEER_VENVS.
PEERS_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/steadystream/peers
PEER_VENVS := aiperf-0.13.0 arize-phoenix-20.26.1
PEERS := $(foreach peer,$(PEER_VENVS),$(PEERS_CACHE)/$(peer)/.installed)
.PHONY: peers
peers: $(PEERS)
unit: $(PEERS)  # here, below the definition: a prerequisite is expanded where it is read

$(PEERS_CACHE)/%/.installed:
	rm -rf $(PEERS_CACHE)/$* && mkdir -p $(PEERS_CACHE)
	$(PYTHON) -m venv $(PEERS_CACHE)/$*
	$(PEERS_CACHE)/$*/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_CACHE)/$*/bin/python -m pip install --quiet "$$(echo '$*' | sed 's/-\([^-]*\)$$/==\1/')"
	touch $@

# nginx, prometheus and redis-server from Debian when one is missing (as root with apt, as on CI's
# fresh machines); anywhere else, say what to install. The tests start their own instances
# on loopback; installing starts no service where invoke-rc.d's policy forbids it.
system-parts:
	@if command -v nginx >/dev/null && command -v prometheus >/dev/null \
		&& command -v redis-server >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "the integration tests need nginx, prometheus and redis-server on PATH:" \
			"install them (Debian/Ubuntu: apt-get install nginx prometheus redis-server)" >&2; \
		exit 1; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx prometheus redis-server

# AddressSanitizer over the compiled twins: a copy of the source built with -fsanitize=address,
# then the relay's tests and thousands of hostile-bytes cases (tests/gateway/test_fuzz.py)
# through it. The interpreter itself is not instrumented: libasan is preloaded into it, and
# its own leaks are not reported (leak checks would flag every interned string).
SANITIZE := build/sanitize
SANITIZED := $(SANITIZE)/.built
SANITIZED_TESTS := tests/gateway/test_fuzz.py tests/gateway/test_line.py \
	tests/gateway/test_events.py tests/gateway/resume/test_ids.py tests/stamped tests/protocol
sanitize: $(SANITIZED)
	rm -rf $(SANITIZE)/run && cp -r src $(SANITIZE)/run
	find $(SANITIZE)/run -name '*.so' -delete
	cd $(SANITIZE)/build/src && find . -name '*.so' -exec cp --parents {} ../../run/ \;
	# (the serial tests, exact to a millisecond on loopback, alone after the rest, as in unit)
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
		PYTHONPATH=$(SANITIZE)/run STEADYSTREAM_FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-2000} \
		$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal \
		-m "not serial" $(SANITIZED_TESTS)
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
		PYTHONPATH=$(SANITIZE)/run $(BIN)/pytest -q -p no:cacheprovider -m serial \
		$(SANITIZED_TESTS)

# The instrumented build of the twins, made again only when one's source or the build changes;
# the rest of the source is copied fresh beside it for every run.
$(SANITIZED): $(STAMP) setup.py $(wildcard src/steadystream/*/*_py.py src/steadystream/*/*_c.pxd \
		src/steadystream/*/*/*_py.py src/steadystream/*/*/*_c.pxd)
	rm -rf $(SANITIZE) && mkdir -p $(SANITIZE)/build
	cp -r src setup.py pyproject.toml MANIFEST.in README.md $(SANITIZE)/build/
	find $(SANITIZE)/build/src -name '*.so' -delete
	cd $(SANITIZE)/build && CFLAGS="-fsanitize=address -fno-omit-frame-pointer -O1" \
		LDFLAGS="-fsanitize=address" $(CURDIR)/$(BIN)/python setup.py -q build_ext --inplace
	touch $(SANITIZED)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage
