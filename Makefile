# Searchlight: `make run` starts the daemon in the foreground (user mode); `make test` runs every test.
SWIFT ?= swift
BUILD := .build/debug
RELEASE := .build/release

# The sample extensions: each its own package, built against the SDK the way a plugin author
# builds one (`swift build --package-path Extensions/NAME`, its own .build inside the folder).
EXTENSIONS := Journal Notes Packages
UNITS := launchd-like-units/extensions

.PHONY: all build release extensions run test bench deps clean

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

extensions: build
	@for e in $(EXTENSIONS); do \
		echo "make: building Extensions/$$e (its own package)"; \
		$(SWIFT) build --package-path Extensions/$$e || exit 1; \
	done

# The daemon in the foreground, user mode, with the sample extensions' units; the first start
# indexes the samples. From a second terminal: .build/debug/searchlight search "json parser"
run: build extensions
	@echo "make run: searchlightd in the foreground, user mode, units from $(UNITS) (it logs its socket); Ctrl-C stops it"
	exec $(BUILD)/searchlightd --units-dir $(UNITS) $(if $(SEARCHLIGHT_SOCKET),--socket $(SEARCHLIGHT_SOCKET),)

# Builds the executables and the sample extensions first: integration tests run the real
# searchlightd, searchlight and extension processes.
test: build extensions
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# The reindex scenario runs the Packages sample extension, so it is built in release too; the
# shared corpus when ../shared is there (else the bench generates one). BENCH_ARGS: see --help.
bench: release
	$(SWIFT) build -c release --package-path Extensions/Packages
	$(RELEASE)/searchlight-bench $(if $(wildcard ../shared/corpus/debian-packages.jsonl.gz),--corpus ../shared/corpus/debian-packages.jsonl.gz,) $(BENCH_ARGS)

clean:
	rm -rf .build $(EXTENSIONS:%=Extensions/%/.build)
