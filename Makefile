# lattn — the two set-up commands (README):
#   make demo   install deps, build, run the main job on the embedded default (CPU)
#   make test   install deps, build, run every test (C++, sanitizers, Python)
#
# Variables: BUILD (build dir), JOBS (parallel jobs), CUDA (AUTO/ON/OFF),
# CUDA_ARCHS (LATTN_CUDA_ARCHS; empty keeps the build's own, "80;90a" by default), WERROR
# (ON: warnings in lattn's own code are errors; CI sets it),
# PYTHON (Debian's interpreter, named explicitly: another python3 may come
# first on PATH).

MAKEFLAGS += --no-print-directory
BUILD  ?= build
ASAN_BUILD ?= build-asan
JOBS   ?= $(shell nproc)
CUDA   ?= AUTO
WERROR ?= OFF
CUDA_ARCHS ?=
PYTHON ?= /usr/bin/python3
CTEST_FLAGS ?= --output-on-failure -j $(JOBS)

.PHONY: all deps configure build demo test test-cpp test-asan test-fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLATTN_CUDA=$(CUDA) -DLATTN_WERROR=$(WERROR) \
	  $(if $(CUDA_ARCHS),-DLATTN_CUDA_ARCHS="$(CUDA_ARCHS)") -DLATTN_PYTHON=ON -DLATTN_PYTHON_EXECUTABLE=$(PYTHON) -DLATTN_TESTS=ON -DLATTN_BENCH=ON >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/tools/lattn run --device cpu

# Every test: the main build's C++ and Python tests, then the C++ tests once
# more under AddressSanitizer + UndefinedBehaviorSanitizer (CPU code only),
# then each libFuzzer target for 30 s (docs/reliability.md).
test: build test-cpp test-asan test-fuzz

test-cpp:
	cd $(BUILD) && ctest $(CTEST_FLAGS)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLATTN_CUDA=OFF -DLATTN_SANITIZE=ON -DLATTN_WERROR=$(WERROR) \
	  -DLATTN_PYTHON=OFF -DLATTN_BENCH=OFF -DLATTN_TESTS=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_FLAGS) -E '$(ASAN_SKIP)'

# Not run under the sanitizers: the installed-package consumer (it builds
# against the Release install), and the two checks of docs/cli.md's text,
# which replay the page's whole default run at -O0 (~6 of the sanitizer run's
# ~9.5 CPU-minutes). The same commands' memory safety is checked there by the
# other cli.command cases (run --verify on every model, bench, DCP, sparse).
ASAN_SKIP = ^(install_consumer|cli\.command\.documented_examples_run|cli\.command\.documented_default_run_is_reproduced)$$

# The libFuzzer targets (clang, ASan + UBSan), FUZZ_SECONDS each.
FUZZ_SECONDS ?= 30
test-fuzz: deps
	JOBS=$(JOBS) scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
