# StateServer — build, run and test.
#
#   make run    install missing system packages, build release, serve on 127.0.0.1:8080
#   make test   install missing system packages, build, run the whole test suite
#   make fuzz   bounded libFuzzer runs (FUZZ_SECONDS each, 60): the request-head framing, the JSON
#               parser, the features' actions and states, JSON Patch, recordings (fuzz/)
#   make test-sanitized  the Swift tests under ThreadSanitizer, then AddressSanitizer (.build-tsan,
#               .build-asan); fails on a failed test or any sanitizer report
#   make bench  benchmarks (nginx baseline, wrk, SSE fan-out, memory); writes docs/PERFORMANCE.md
#   make bench-cluster  the several-node benchmark alone (1, 2, 3 nodes on PostgreSQL, each under a
#               CPU quota); rewrites only its section of docs/PERFORMANCE.md
#   make faults the fault-injection suite, long form (tests-faults/; its short form is in make test)
#
# System packages are installed with apt-get (as root, or through sudo).

SWIFT        ?= swift
# Build: libmicrohttpd-dev libsqlite3-dev pkg-config. Tests: curl, postgresql (initdb, pg_ctl, psql),
# nginx-light, python3 and python3-venv (schemathesis, pytest, the OpenAPI client), procps (pgrep in
# scripts/test.sh), openssl (the TLS tests' throwaway certificates, `openssl s_client`), iproute2 (`ip netns`:
# the presence test's client whose network vanishes). The browser
# step installs chromium and chromium-driver itself, the metrics lint step
# (scripts/metrics-lint.sh) Debian's prometheus package, for promtool.
APT_PACKAGES := libmicrohttpd-dev libsqlite3-dev pkg-config curl postgresql nginx-light python3 python3-venv procps openssl iproute2
# The release build, shared word for word with the Dockerfile (a test checks it; `$$` is the
# Makefile's `$`). It runs in an environment of PATH and HOME only: SwiftPM re-plans the build
# when the environment its manifests are evaluated in changes (make's MAKEFLAGS, the shell's `_`,
# a terminal's variables), and then recompiled swift-configuration's module on every `make run`.
RELEASE_BUILD := env -i PATH="$$PATH" HOME="$$HOME" swift build -c release --product state-server --static-swift-stdlib

.PHONY: all deps build release run test test-sanitized browser-test bench bench-cluster fuzz faults clean

all: build

# scripts/lib/apt-install.sh installs the missing ones quietly (the scripts use it too).
deps:
	@bash scripts/lib/apt-install.sh $(APT_PACKAGES)

build: deps
	$(SWIFT) build

# The release build has a build folder of its own (.build-release): sharing .build with the debug
# build of `make test` made SwiftPM re-plan and recompile on every switch (a second `make run`
# after `make test` took 10-12 s with nothing changed). The binary is then copied to
# .build/release/state-server, where the README, bench/ and the Dockerfile expect it.
release: deps
	$(RELEASE_BUILD) --scratch-path .build-release
	@cmp -s .build-release/release/state-server .build/release/state-server \
		|| install -D -p .build-release/release/state-server .build/release/state-server

run: release
	mkdir -p data
	.build/release/state-server --config config/state-server.yaml --storage sqlite:data/state-server.db

# Every step (swift test, the HTTP suite on SQLite, stops under load, the PostgreSQL steps,
# schemathesis, the OpenAPI client check, httplint, the metrics lint, the browser, the faults'
# short form), then a summary of each as the last lines; fails if any step failed.
# The Python tools live in .cache/venv (scripts/python-env.sh), never in the system's Python.
test: deps
	@bash scripts/test.sh

# Benchmarks against nginx and a Python peer, in one run; writes docs/PERFORMANCE.md.
bench: release
	bash bench/run.sh

# The PostgreSQL phase alone (issue 15 item 6): nodes 1, 2, 3 each under a cgroup CPU quota
# (BENCH_NODE_CPU, default 0.10 CPU), direct and through nginx by session; scaling, CPU per
# dispatch, round trips to PostgreSQL. Writes only the several-node section of the page.
bench-cluster: release
	BENCH_PHASES=postgres bash bench/run.sh

# libFuzzer, each target for FUZZ_SECONDS (default 60): the C shim's framing pass through the real
# libmicrohttpd (fuzz/framing_fuzz.c), and the Swift targets of fuzz/Package.swift (json, features,
# patch, recording; built with -sanitize=fuzzer,address into .build-fuzz, never by `make test`).
# FUZZ_TARGETS picks some. Prints the inputs run, time and findings per target; fails on a finding.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= framing json features patch recording
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_TARGETS="$(FUZZ_TARGETS)" bash scripts/fuzz.sh

# `swift test` under ThreadSanitizer and AddressSanitizer (scripts/test-sanitized.sh), each build in
# a folder of its own; the servers the tests start are the sanitized build's. Not part of `make test`.
test-sanitized: deps
	@bash scripts/test-sanitized.sh

# The fault-injection suite's long form (issue 15 item 5): real PostgreSQL, three nodes, nginx,
# proxies that delay, cut and black-hole; SIGKILL, SIGSTOP, PostgreSQL restarts; every history
# checked. FAULTS_RUNS (3) runs of each scenario. `make test` runs the short form.
faults: build
	bash scripts/faults.sh long

browser-test: build
	STATE_SERVER_BIN=.build/debug/state-server bash scripts/browser-test.sh

# Everything the build and the tests leave: the debug, release, fuzz and sanitized builds and .cache
# (the test tools' Python environment, the fuzz corpora). Keeps data/ (the sessions of `make run`).
clean:
	rm -rf .build .build-release .build-fuzz .build-tsan .build-asan .cache
