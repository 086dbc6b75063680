# Two tiers of tests. `make check` after every edit, in about two minutes: vet, the
# wasip1 build, and the unit tests (the conformance suite on memory among them) without
# -race. `make test` before a push, and in CI: the whole suite, with -race. Both install
# what the tests need when it is missing (make deps: redis-server, redis-tools, wabt,
# clang, chromium and npm from Debian's packages, the AssemblyScript packages from npm).

GO ?= go
WASM_ENV := GOOS=wasip1 GOARCH=wasm
# abi and guest-sdk are modules of their own (guest-sdk/README.md), which the root's ./...
# does not reach: vet and test run in each module. bench (the asynq comparison, which
# make bench-compare runs) is one too, which vet builds so that its go.sum follows the
# root's dependencies: a module the root adds breaks bench until `go -C bench mod tidy`.
MODULES := abi guest-sdk . bench

.PHONY: test test-race test-sandbox check deps vet wasm-build build plugins demo bench-compare

# test runs every test of every module, nothing skipped, with -race where it finds races:
# the unit tests, which hammer the primitives, the slots, the drain and the API from many
# goroutines; tests/console, which runs the daemon in process; and the daemons of
# tests/cli's tests of the daemon's concurrent lifecycle (signals, the drain, kill -9,
# reload, the API under load, the chaos test: raceDaemons in tests/cli/main_test.go), a
# race there being one no in-process test meets. It goes
# without -race where -race would only slow:
#   - tests/, the sandbox and hostile suites: each runs real guests in a host whose
#     concurrency the unit tests of host/ already hold under -race, and spends its time in
#     guest code and module loads, which -race slows four times (~460 s against ~115 s on
#     2 cores) and instruments nothing of (compiled guest code is not Go);
#   - tests/cli's other daemons and its one-shot subcommands (doctor, submit, new...): a
#     -race daemon costs seconds of CPU a start (it decodes and validates a Go guest about
#     seven times slower), and finds nothing there the race daemons do not meet too.
# The guests are built for wasip1, and each is compiled into the shared wazero cache once,
# when it is built, by a fleet-host without -race (internal/testutil, FleetHost and
# precompile), so that no test binary compiles a guest under -race (~31 s of CPU for the
# 6 MB scraper, against ~3 s). Test binaries that want the same guest at once wait for one
# build of it (a file lock in the cache). The -race half starts at once, beside vet and
# the wasip1 build (make -j2), and each half prints its output when it ends. The -race
# half runs four test binaries at once (-p 4, where go test's default is one per core):
# host/, tests/cli and primitives/redis spend most of their time waiting (on leases,
# drains, daemons and servers), and two at a time left the 2 cores half idle. Its
# binaries, and the daemons tests/cli starts from them, exit at once (GORACE's
# atexit_sleep_ms=0, where -race waits a second at every exit for late reports): the
# tests read a race from the report a race prints when it happens, and from exit code 66.
test: deps
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-race test-sandbox

# test-race and test-sandbox are test's two halves; run test, which runs both.
test-race:
	@for m in abi guest-sdk; do \
		echo "$(GO) -C $$m test -race -count=1 -timeout 20m ./..."; \
		$(GO) -C $$m test -race -count=1 -timeout 20m ./... || exit 1; \
	done
	GORACE=atexit_sleep_ms=0 $(GO) test -race -count=1 -timeout 20m -p 4 $$($(GO) list ./... | grep -v -x github.com/fleethost/fleet/tests)

test-sandbox: vet wasm-build
	$(GO) test -count=1 -timeout 20m ./tests/

# FAST is what check tests in the root module: every package but the integration ones,
# which make test runs: tests/ (hosts with real guests), tests/cli (the binary, chaos,
# the Cluster), tests/console (Chromium), and primitives/redis (the conformance suite on
# Redis and a Redis Cluster; primitives/memory runs it on memory here).
FAST = $$($(GO) list ./... | grep -v -e '/tests$$' -e '/tests/' -e '/primitives/redis$$')

# check is the edit loop's tier: the same vet and wasip1 build as test, then the unit
# tests without -race, which make test runs with it.
check: deps vet wasm-build
	$(GO) -C abi test -count=1 ./...
	$(GO) -C guest-sdk test -count=1 ./...
	$(GO) test -count=1 $(FAST)

# deps installs the servers and tools the tests start. A missing one would fail the
# tests (never skip them), so install rather than hope. redis-cli (Debian's redis-tools,
# which redis-server's package depends on) joins the Redis Cluster the tests start. clang,
# lld (wasm-ld) and wasi-libc build the C plugins of guest-sdk/c (testutil.BuildC);
# chromium runs the console's browser tests (tests/console).
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	command -v wat2wasm >/dev/null 2>&1 || missing="$$missing wabt"; \
	command -v clang >/dev/null 2>&1 || missing="$$missing clang"; \
	command -v wasm-ld >/dev/null 2>&1 || missing="$$missing lld"; \
	test -f "$$(clang --target=wasm32-wasi -print-file-name=crt1-reactor.o 2>/dev/null)" || missing="$$missing wasi-libc"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# The AssemblyScript compiler and the Extism PDK of the Extism plugins in the tests,
	@# at the versions testdata/assemblyscript/package-lock.json pins.
	@test -x testdata/assemblyscript/node_modules/.bin/asc -a -d testdata/assemblyscript/node_modules/@extism/as-pdk || \
		{ echo "installing: npm ci in testdata/assemblyscript"; cd testdata/assemblyscript && npm ci --no-audit --no-fund; }

vet:
	@for m in $(MODULES); do echo "$(GO) -C $$m vet ./..."; $(GO) -C $$m vet ./... || exit 1; done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# The guest side must build for wasip1 (DESIGN.md: abi/ compiles for host and guest).
wasm-build:
	$(WASM_ENV) $(GO) -C abi build ./...
	$(WASM_ENV) $(GO) -C guest-sdk build ./...
	$(WASM_ENV) $(GO) build ./plugins/...

# build: the fleet-host binary in bin/, and the example plugins in bin/plugins/ (both
# gitignored), with only Go.
EXAMPLES := scraper cookie-harvester counter noop

build: plugins
	$(GO) build -o bin/fleet-host ./cmd/fleet-host

plugins:
	@mkdir -p bin/plugins
	@for p in $(EXAMPLES); do \
		echo "$(WASM_ENV) $(GO) build -buildmode=c-shared -o bin/plugins/$$p.wasm ./plugins/examples/$$p"; \
		$(WASM_ENV) $(GO) build -buildmode=c-shared -o bin/plugins/$$p.wasm ./plugins/examples/$$p || exit 1; \
	done

# demo: the scraper and the cookie harvester on a real daemon against a local demo site:
# 50 URLs through the HTTP API, progress, the final counts, a SIGTERM drain. Exits 0 when
# every URL was scraped and nothing was parked. Needs only Go (no Redis). It prints the
# console's URL; `make demo DEMO_FLAGS=--keep` keeps the daemon up after the run until Ctrl-C.
demo: build
	$(GO) run ./cmd/fleet-demo --bin bin/fleet-host --plugins bin/plugins $(DEMO_FLAGS)

# bench-compare: the benchmarks of PKG (default bench, against asynq) built at the git ref
# REF and in the current tree, run alternated in ROUNDS rounds (default 4) in one run, and
# each benchmark's medians with the ratio current/REF (bench/compare/compare.sh;
# docs/benchmarks.md). E.g. `make bench-compare REF=main`, or
# `make bench-compare REF=main PKG=host/internal/slot BENCH=HotPath BENCHTIME=20000x`.
REF ?=
ROUNDS ?= 4
bench-compare:
	@test -n "$(REF)" || { echo "bench-compare: set REF, the git ref to compare with: make bench-compare REF=main"; exit 2; }
	GO=$(GO) PKG=$(or $(PKG),bench) BENCH=$(or $(BENCH),NoopThroughput) BENCHTIME=$(or $(BENCHTIME),1x) ARGS="$(ARGS)" \
		bench/compare/compare.sh $(REF) $(ROUNDS)
