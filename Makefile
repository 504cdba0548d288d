# metaq-go. `make run` starts a local broker; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
TESTFLAGS ?= -race -timeout 12m
CONFIG    ?= conf/server.toml

.PHONY: all build run test vet fmt-check bench fuzz clean examples

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

examples: build

run: build
	$(BIN)/metaq-server --config $(CONFIG)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null | grep -v '\.pb\.go$$' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: fmt-check vet build
	$(GO) test $(TESTFLAGS) $(PKGS)

# Benchmarks: Go benchmarks for the hot paths, then whole-system runs with
# the raw-disk baseline measured in the same command (see docs/benchmarks.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./sdk/protocol/ ./core/store/ ./core/broker/
	$(BIN)/metaq bench all

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./sdk/protocol/
	$(GO) test -run '^$$' -fuzz FuzzParseRecord -fuzztime 30s ./sdk/message/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./conf/
	$(GO) test -run '^$$' -fuzz FuzzRecover -fuzztime 30s ./core/store/

clean:
	rm -rf $(BIN)
