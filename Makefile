# The one command: `make test`. It installs what the tests need when it is missing
# (redis-server and wabt from Debian's packages), then vets, builds the guest side for
# wasip1, and runs every test with the race detector.

GO ?= go
WASM_ENV := GOOS=wasip1 GOARCH=wasm

.PHONY: test deps vet wasm-build

test: deps vet wasm-build
	$(GO) test -race -count=1 -timeout 20m ./...

# deps installs the servers and tools the tests start. A missing one would fail the
# tests (never skip them), so install rather than hope.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v wat2wasm >/dev/null 2>&1 || missing="$$missing wabt"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# The guest side must build for wasip1 (DESIGN.md: abi/ compiles for host and guest).
wasm-build:
	$(WASM_ENV) $(GO) build ./abi/... ./guest-sdk/... ./plugins/...
