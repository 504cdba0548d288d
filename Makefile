# metaq-go. `make run` starts a local broker; `make test` runs every test.
GO        ?= go
BIN       := bin
PKGS      := ./...
TESTFLAGS ?= -race -timeout 14m -parallel 4
CONFIG    ?= conf/server.toml

# -trimpath: what the go command compiles does not depend on where the
# checkout is, so a fresh clone (or a worktree) reuses the build cache of
# an earlier one instead of compiling every package of the module again.
export GOFLAGS ?= -trimpath

# Plugin binaries (shipped offset stores, the MySQL XA coordinator and the
# example plugins) are built into bin/plugins, the folder the sample
# server.toml points at.
PLUGIN_MAINS := $(wildcard cmd/metaq-offsetstore-* cmd/metaq-txn-* examples/*-plugin)
PROTOS       := $(shell find . -name '*.proto' -not -path './bin/*' 2>/dev/null)
GOBIN_DIR    := $(shell $(GO) env GOPATH)/bin

.PHONY: all build man run cluster test soak vet lint fmt-check bench fuzz clean examples plugins generate protoc-tools services

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

# A local ZooKeeper and two brokers (ids 1 and 2 on 8123 and 8124) for
# trying cluster mode; Ctrl-C stops them. See examples/deploy/README.md.
cluster: build
	CONFIG=$(CONFIG) BIN=$(BIN) bash examples/deploy/cluster.sh

vet:
	$(GO) vet $(PKGS)

# staticcheck with its default checks (unused code included), fetched and
# built by go run from the Go module proxy at this version.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	$(STATICCHECK) $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null | grep -v '\.pb\.go$$' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Install the real servers the integration tests use (ZooKeeper, MariaDB)
# when missing; the tests start their own instances on free 127.0.0.1 ports.
services:
	bash .ci/services.sh install

# The tests take the binaries make build just linked (METAQ_TEST_PREBUILT,
# internal/testsvc) and run side by side with staticcheck; make test fails
# if either does. A -race binary sleeps atexit_sleep_ms (1 s by default)
# when it exits, for races in goroutines still running then: a second per
# test binary (60 packages, go test runs -p of them at once) and per -race
# process a test starts; TEST_GORACE turns it off (options of $GORACE
# still apply after it).
TEST_GORACE ?= atexit_sleep_ms=0
test: fmt-check vet build services
	@$(STATICCHECK) $(PKGS) > $(BIN)/lint.out 2>&1 & lint=$$!; \
	echo "$(STATICCHECK) $(PKGS) (in the background)"; \
	echo "$(GO) test $(TESTFLAGS) $(PKGS)"; \
	GORACE="$(TEST_GORACE) $$GORACE" METAQ_TEST_PREBUILT=$(CURDIR)/$(BIN):$(CURDIR)/$(BIN)/plugins $(GO) test $(TESTFLAGS) $(PKGS); rc=$$?; \
	if ! wait $$lint; then cat $(BIN)/lint.out; echo "make test: staticcheck failed"; exit 1; fi; \
	exit $$rc

# Long runs of the crash and power-loss tests of the real binary
# (core/e2e): SOAK_CUTS power cuts under load over 64 partitions (make test
# does 20), SOAK_TORN_CUTS torn cuts only (a random subset of the unsynced
# pages kept: issue 25) in group-commit mode and 7 x 6 in threshold mode,
# and the kill -9 tests repeated SOAK_COUNT times; the journal
# cut at every record boundary (make test samples 20 of each kind); a
# syncfs checkpoint's write-back cut in all five faultfs modes (make test:
# two); the
# store's tests on the disk's temporary directory (make test runs them on a
# tmpfs when /dev/shm is one); and sdk/balance's joins and leaves over 5
# seeded sequences (make test runs 1); metaq tail killed with SIGKILL
# SOAK_TAIL_ROUNDS times while it follows a rotating file (make test: 4);
# and the idempotent producer's fault tests with 10,000 messages (make test
# sends 2,000); and 1,000,000 delayed messages over 120 s across 64
# partitions, without -race: the lateness p99 is a figure of the timer
# (make test sends 20,000 over 3 s); and delayed messages due over 60 s
# through 10 kill -9s and 10 power cuts (make test: 3 each over 3 s).
SOAK_CUTS  ?= 100
SOAK_TORN_CUTS ?= 40
SOAK_COUNT ?= 5
SOAK_TAIL_ROUNDS ?= 30
soak: build
	METAQ_POWER_CUTS=$(SOAK_CUTS) $(GO) test -race -timeout 60m -count=1 -v -run '^TestPowerCuts64$$' ./core/e2e/
	METAQ_POWER_CUTS=$(SOAK_TORN_CUTS) METAQ_POWER_CUT_MODES=torn $(GO) test -race -timeout 60m -count=1 -v -run '^TestPowerCuts64$$' ./core/e2e/
	METAQ_POWER_CUT_MODES=torn $(GO) test -race -timeout 60m -count=7 -v -run '^TestPowerCutsThreshold$$' ./core/e2e/
	$(GO) test -race -timeout 60m -count=$(SOAK_COUNT) -run '^(TestCrashGroupCommit64|TestPowerCutsThreshold|TestThousandPartitions)$$' ./core/e2e/
	METAQ_JOURNAL_CUTS=all $(GO) test -race -timeout 60m -count=1 -run '^TestJournalCrashCuts$$' ./core/store/
	METAQ_WRITEBACK_CUTS=all $(GO) test -race -timeout 20m -count=1 -run '^TestPowerCutWriteBackSyncfs$$' ./core/store/
	METAQ_STORE_TEST_DISK=1 $(GO) test -race -timeout 30m -count=1 ./core/store/
	METAQ_FAILOVER_ROUNDS=30 $(GO) test -timeout 20m -count=1 -v -run '^TestSyncFailoverKill9$$' ./core/e2e/
	METAQ_FAILOVER_POWERCUTS=5 $(GO) test -timeout 20m -count=1 -v -run '^TestSyncFailoverPowerCut$$' ./core/e2e/
	METAQ_TX_FAILOVER_ROUNDS=20 $(GO) test -timeout 20m -count=1 -v -run '^TestTxSyncFailoverKill9$$' ./core/e2e/
	METAQ_BALANCE_SEEDS=5 $(GO) test -race -timeout 10m -count=1 -run '^TestJoinsAndLeaves$$' ./sdk/balance/
	METAQ_TAIL_ROUNDS=$(SOAK_TAIL_ROUNDS) $(GO) test -race -timeout 20m -count=1 -v -run '^TestTailKill9$$' ./cmd/metaq/
	METAQ_DELAYED_COUNT=1000000 METAQ_DELAYED_SPAN=120 $(GO) test -timeout 30m -count=1 -v -run '^TestDelayedScale$$' ./core/broker/
	METAQ_DELAYED_CRASH_ROUNDS=10 METAQ_DELAYED_CRASH_SPAN=60 METAQ_DELAYED_CRASH_PARTS=64 $(GO) test -race -timeout 30m -count=1 -v -run '^(TestDelayedKill9|TestDelayedPowerCut|TestTxDelayedKill9)$$' ./core/e2e/
	METAQ_IDEM_MESSAGES=10000 $(GO) test -race -timeout 20m -count=1 -run '^TestIdempotent' ./sdk/client/ ./core/e2e/

# Benchmarks: Go benchmarks for the hot paths, then whole-system runs with
# the raw-disk baseline measured in the same command (see docs/benchmarks.md).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./sdk/protocol/ ./core/store/ ./core/broker/
	$(GO) test -run '^$$' -bench BenchmarkLookup -benchtime 5000x ./core/index/
	$(GO) test -run '^$$' -bench BenchmarkClusterRebalance -benchtime 5x ./sdk/client/
	$(GO) test -run '^$$' -bench BenchmarkTransaction -benchtime 3s ./sdk/client/
	$(GO) test -run '^$$' -bench BenchmarkProducerProperties -benchtime 3s ./sdk/client/
	$(GO) test -run '^$$' -bench BenchmarkXA -benchtime 3s ./txn/metaqbroker/
	$(GO) test -run '^$$' -bench '^BenchmarkFailover$$' -benchtime 5x ./core/e2e/
	$(BIN)/metaq bench all

# Every parser's fuzz target, FUZZTIME each (make fuzz FUZZTIME=5m before
# resolving a security issue). Crashers land in testdata/fuzz and then run
# as seeds in make test.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./sdk/protocol/
	$(GO) test -run '^$$' -fuzz '^FuzzTransaction$$' -fuzztime $(FUZZTIME) ./sdk/protocol/
	$(GO) test -run '^$$' -fuzz '^FuzzTxKey$$' -fuzztime $(FUZZTIME) ./sdk/protocol/
	$(GO) test -run '^$$' -fuzz FuzzParseRecord -fuzztime $(FUZZTIME) ./sdk/message/
	$(GO) test -run '^$$' -fuzz '^FuzzPropsRoundTrip$$' -fuzztime $(FUZZTIME) ./sdk/message/
	$(GO) test -run '^$$' -fuzz '^FuzzPropsHostile$$' -fuzztime $(FUZZTIME) ./sdk/message/
	$(GO) test -run '^$$' -fuzz '^FuzzTimerHeaders$$' -fuzztime $(FUZZTIME) ./sdk/message/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./core/timer/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./conf/
	$(GO) test -run '^$$' -fuzz '^FuzzTailSplit$$' -fuzztime $(FUZZTIME) ./cmd/metaq/
	$(GO) test -run '^$$' -fuzz '^FuzzTailState$$' -fuzztime $(FUZZTIME) ./cmd/metaq/
	$(GO) test -run '^$$' -fuzz '^FuzzParseTopicsFile$$' -fuzztime $(FUZZTIME) ./conf/
	$(GO) test -run '^$$' -fuzz FuzzParseExpr -fuzztime $(FUZZTIME) ./filters/expr/
	$(GO) test -run '^$$' -fuzz '^FuzzProduceBody$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzProduceFast$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzBase64$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzRecordJSON$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzParseView$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz FuzzMatchHostile -fuzztime $(FUZZTIME) ./filters/expr/
	$(GO) test -run '^$$' -fuzz "^FuzzRecover$$" -fuzztime $(FUZZTIME) ./core/store/
	$(GO) test -run '^$$' -fuzz FuzzDecodePacked -fuzztime $(FUZZTIME) ./filters/
	$(GO) test -run '^$$' -fuzz FuzzParseChanRequest -fuzztime $(FUZZTIME) ./filters/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePartition$$' -fuzztime $(FUZZTIME) ./sdk/message/
	$(GO) test -run '^$$' -fuzz FuzzJournalPayloads -fuzztime $(FUZZTIME) ./core/store/
	$(GO) test -run '^$$' -fuzz FuzzJournalScan -fuzztime $(FUZZTIME) ./core/store/
	$(GO) test -run '^$$' -fuzz '^FuzzCountRecords$$' -fuzztime $(FUZZTIME) ./core/store/
	$(GO) test -run '^$$' -fuzz '^FuzzParseBrokerName$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParseChunk$$' -fuzztime $(FUZZTIME) ./core/index/
	$(GO) test -run '^$$' -fuzz '^FuzzParseConsumerID$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParseMemberData$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePartitionName$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParseTopicData$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEpochData$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzParseOffsetData$$' -fuzztime $(FUZZTIME) ./internal/zkpath/
	$(GO) test -run '^$$' -fuzz '^FuzzAdminAPI$$' -fuzztime $(FUZZTIME) ./core/broker/
	$(GO) test -run '^$$' -fuzz '^FuzzTxJournal$$' -fuzztime $(FUZZTIME) ./core/tx/
	$(GO) test -run '^$$' -fuzz '^FuzzTxSync$$' -fuzztime $(FUZZTIME) ./core/tx/
	$(GO) test -run '^$$' -fuzz '^FuzzDashboard$$' -fuzztime $(FUZZTIME) ./core/broker/
	$(GO) test -run '^$$' -fuzz '^FuzzCommittedFile$$' -fuzztime $(FUZZTIME) ./core/groups/
	$(GO) test -run '^$$' -fuzz '^FuzzJSONDupKeys$$' -fuzztime $(FUZZTIME) ./core/httpapi/
	$(GO) test -run '^$$' -fuzz '^FuzzEpochs$$' -fuzztime $(FUZZTIME) ./core/repl/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCountItem$$' -fuzztime $(FUZZTIME) ./core/broker/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCountReply$$' -fuzztime $(FUZZTIME) ./sdk/admin/

clean:
	rm -rf $(BIN)

# Man pages of every metaq command, generated from the command tree.
MAN_DIR ?= $(BIN)/man
man:
	@mkdir -p $(MAN_DIR)
	$(GO) run ./cmd/metaq gen-man $(MAN_DIR)
