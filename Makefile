# The one command: `make test`. It installs what the tests need when it is missing
# (redis-server, redis-tools, wabt, chromium and npm from Debian's packages, the
# AssemblyScript packages from npm), then vets, builds the guest side for
# wasip1, and runs every test with the race detector.

GO ?= go
WASM_ENV := GOOS=wasip1 GOARCH=wasm
# abi and guest-sdk are modules of their own (guest-sdk/README.md), which the root's ./...
# does not reach: vet and test run in each module.
MODULES := abi guest-sdk .

.PHONY: test deps vet wasm-build build plugins demo

test: deps vet wasm-build
	@for m in $(MODULES); do \
		echo "$(GO) -C $$m test -race -count=1 -timeout 20m ./..."; \
		$(GO) -C $$m test -race -count=1 -timeout 20m ./... || exit 1; \
	done

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
