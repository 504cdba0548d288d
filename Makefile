# metaq-go. `make run` starts a local broker; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
TESTFLAGS ?= -race -timeout 12m
CONFIG    ?= conf/server.toml

# Plugin binaries (shipped offset stores and the example plugins) are built
# into bin/plugins, the folder the sample server.toml points at.
PLUGIN_MAINS := $(wildcard cmd/metaq-offsetstore-* examples/*-plugin)
PROTOS       := $(shell find . -name '*.proto' -not -path './bin/*' 2>/dev/null)
GOBIN_DIR    := $(shell $(GO) env GOPATH)/bin

.PHONY: all build run test vet fmt-check bench fuzz clean examples plugins generate protoc-tools services

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/metaq ./cmd/metaq-server ./examples/producer ./examples/consumer ./examples/selector ./examples/cluster-consumer
	@$(MAKE) --no-print-directory plugins

plugins:
	@if [ -n "$(PLUGIN_MAINS)" ]; then mkdir -p $(BIN)/plugins && \
		echo "$(GO) build -o $(BIN)/plugins/ $(addprefix ./,$(PLUGIN_MAINS))" && \
		$(GO) build -o $(BIN)/plugins/ $(addprefix ./,$(PLUGIN_MAINS)); fi

# Regenerate the committed protobuf code: protoc from Debian's
# protobuf-compiler, the Go generators from the Go module proxy.
protoc-tools:
	@command -v protoc >/dev/null || (apt-get update && apt-get install -y protobuf-compiler)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

generate: protoc-tools
	PATH="$(GOBIN_DIR):$$PATH" protoc -I . --go_out=. --go_opt=module=github.com/metaq-go/metaq \
		--go-grpc_out=. --go-grpc_opt=module=github.com/metaq-go/metaq $(PROTOS)

examples: build

run: build
	$(BIN)/metaq-server --config $(CONFIG)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null | grep -v '\.pb\.go$$' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Install the real servers the integration tests use (ZooKeeper, MariaDB)
# when missing; the tests start their own instances on free 127.0.0.1 ports.
services:
	bash .ci/services.sh install

test: fmt-check vet build services
	$(GO) test $(TESTFLAGS) $(PKGS)

# Benchmarks: Go benchmarks for the hot paths, then whole-system runs with
# the raw-disk baseline measured in the same command (see docs/benchmarks.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./sdk/protocol/ ./core/store/ ./core/broker/
	$(GO) test -run '^$$' -bench BenchmarkClusterRebalance -benchtime 5x ./sdk/client/
	$(BIN)/metaq bench all

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./sdk/protocol/
	$(GO) test -run '^$$' -fuzz FuzzParseRecord -fuzztime 30s ./sdk/message/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./conf/
	$(GO) test -run '^$$' -fuzz FuzzParseExpr -fuzztime 30s ./filters/expr/
	$(GO) test -run '^$$' -fuzz FuzzRecover -fuzztime 30s ./core/store/
	$(GO) test -run '^$$' -fuzz FuzzDecodePacked -fuzztime 30s ./filters/
	$(GO) test -run '^$$' -fuzz FuzzParseChanRequest -fuzztime 30s ./filters/

clean:
	rm -rf $(BIN)
