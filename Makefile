# Searchlight: `make run` starts the daemon in the foreground (user mode); `make test` runs every test.
SWIFT ?= swift
BUILD := .build/debug
RELEASE := .build/release

.PHONY: all build release run test bench deps clean

all: build

# The only system requirement beyond the Swift toolchain: SQLite's headers (Debian: libsqlite3-dev).
deps:
	@command -v $(SWIFT) >/dev/null || { echo "make: the Swift toolchain (swift) is not on PATH; install Swift 6 from swift.org" >&2; exit 1; }
	@if ! pkg-config --exists sqlite3 2>/dev/null && [ ! -f /usr/include/sqlite3.h ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make: installing libsqlite3-dev (SQLite headers)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libsqlite3-dev pkg-config >/dev/null; \
		else \
			echo "make: SQLite's headers are missing: run 'sudo apt-get install libsqlite3-dev pkg-config'" >&2; exit 1; \
		fi; \
	fi

build: deps
	$(SWIFT) build
	@ln -sf searchlight $(BUILD)/mdutil

release: deps
	$(SWIFT) build -c release
	@ln -sf searchlight $(RELEASE)/mdutil

# The daemon in the foreground, user mode. From a second terminal: .build/debug/searchlight status
run: build
	@echo "make run: searchlightd in the foreground, user mode (it logs its socket); Ctrl-C stops it"
	exec $(BUILD)/searchlightd $(if $(SEARCHLIGHT_SOCKET),--socket $(SEARCHLIGHT_SOCKET),)

# Builds the executables first: integration tests run the real searchlightd and searchlight.
test: build
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

bench: release
	$(RELEASE)/searchlight-bench $(BENCH_ARGS)

clean:
	rm -rf .build
