# StateServer — build, run and test.
#
#   make run    install missing system packages, build release, serve on 127.0.0.1:8080
#   make test   install missing system packages, build, run the whole test suite
#   make bench  benchmarks (nginx baseline, wrk, SSE fan-out, memory); writes docs/PERFORMANCE.md
#
# System packages are installed with apt-get (as root, or through sudo).

SWIFT        ?= swift
APT_PACKAGES := libmicrohttpd-dev libsqlite3-dev pkg-config curl nginx-light
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The release build, shared word for word with the Dockerfile (a test checks it).
RELEASE_BUILD := swift build -c release --product state-server --static-swift-stdlib

.PHONY: all deps build release run test browser-test bench clean

all: build

deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(RELEASE_BUILD)

run: release
	mkdir -p data
	.build/release/state-server --config config/state-server.yaml --storage sqlite:data/state-server.db

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test
	@echo "== the HTTP behaviour suite again, against SQLite storage =="
	STATE_SERVER_TEST_STORAGE=sqlite $(SWIFT) test --skip-build --filter StateServerIntegrationTests
	@echo "== schemathesis against the OpenAPI description, on a live server =="
	bash scripts/schemathesis.sh
	@echo "== the web page in a real browser (headless Chromium) =="
	STATE_SERVER_BIN=.build/debug/state-server bash scripts/browser-test.sh

# Benchmarks against nginx and a Python peer, in one run; writes docs/PERFORMANCE.md.
bench: release
	bash bench/run.sh

browser-test: build
	STATE_SERVER_BIN=.build/debug/state-server bash scripts/browser-test.sh

clean:
	rm -rf .build
