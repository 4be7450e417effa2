# One-command entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
BIN       := bin
AZURITE   := Azurite/node_modules/.bin/azurite-blob
GOTESTFLAGS ?=

.PHONY: all build test tidy vet azurite clean fuzz demo nats-server bench bench-peers bench-programs chaos test-million test-keyed5m test-longread

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/worker

# A nats-server binary at the version pinned in go.mod, for running a cluster by hand.
nats-server:
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

# The failover demo on this machine (Go, node and npm; no Docker): Azurite, NATS with JetStream
# and 3 workers; the leader is killed half-way through a primes job. DEMOFLAGS: go run ./cmd/demo -h
demo: azurite
	$(GO) run ./cmd/demo $(DEMOFLAGS)

# Azurite's npm packages (pinned in Azurite/package-lock.json), installed when absent.
azurite: $(AZURITE)
$(AZURITE): Azurite/package.json Azurite/package-lock.json
	npm ci --prefix Azurite --no-audit --no-fund --loglevel=error
	@touch $@

# go.mod and go.sum must be tidy (a dependency used directly but marked indirect, or one no
# longer used, fails the test run).
tidy:
	$(GO) mod tidy -diff

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...

test: azurite tidy vet
	$(GO) test -race -timeout 15m $(GOTESTFLAGS) ./...

# The 1,000,000-shard sleep job in bounded memory, its leader replaced half-way, exact
# (internal/coordinator/plan_test.go; about 2 minutes under -race on 2 cores, too slow for `make test`,
# which runs the same path at 20,000 shards).
test-million: azurite
	MAPAGG_MILLION=1 $(GO) test -race -timeout 15m -count=1 -v -run '^TestPlan_MillionShardJobInBoundedMemory$$' ./internal/coordinator/

# Issue 19's keyed job at scale: wordcount "output":"blob" over 5M distinct words (170 MB) on 3
# workers with leader kills; reports every worker's peak RSS (limit 300 MiB). Several minutes.
test-keyed5m: azurite
	MAPAGG_KEYED5M=1 $(GO) test -timeout 30m -count=1 -v -run '^TestKeyed5M_' ./e2e/keyed5m/

# Issue 32's long read: a Map that spends 60 s reading one 1 MiB range (four times the storage
# client's time per try) succeeds, exactly (internal/harness/testworker/userjobs; about two
# minutes). `make test` runs the same path with bodies cut every 64 KiB by a proxy.
test-longread: azurite
	MAPAGG_LONGREAD=1 $(GO) test -race -timeout 10m -count=1 -v -run '^TestLongRead_' ./internal/harness/testworker/userjobs/

# Short fuzz runs of every decoder of outside input (FUZZTIME per target).
FUZZTIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The failover load test and benchmark (cmd/loadtest) at default worker settings: throughput and
# CPU per shard against a bare JetStream loop batched as the dispatcher does (and one message per
# shard), efficiency, a small job against its bare compute (client and CLI, 100 runs each),
# wordcount vocabularies, a straggler, leader crash and graceful handover, a follower crash, a
# 1M-shard job, a 30 s NATS outage, a 3-node NATS cluster losing a node, a 10-minute loaded
# no-fault run, takeover by failure class, and issue 32's keyed figures: keyed wordcount over a
# 50k-word and a 5M-word 174 MB corpus against an optimized and a naive single-process count
# (interleaved rounds, CPU-seconds of every process), the 5M job beside a CPU-bound job (leader
# changes, every worker's peak RSS), a keyed per-user sum over 2M CSV rows against a naive Go
# program. Exact results. About an hour on 2 cores. Report (.bench/report.json), summary
# (targets with verdicts, .bench/report.md) and timeline in .bench/; docs/bench/README.md reads them.
# BENCHFLAGS: go run ./cmd/loadtest -h (BENCHFLAGS=--quick: the few-minute correctness run;
# BENCHFLAGS='--scenarios keyed,keyed-loaded,csv-sum,small-job': issue 32's figures alone).
bench: azurite bench-peers
	@mkdir -p .bench
	$(GO) run ./cmd/loadtest --json .bench/report.json --markdown .bench/report.md --plot .bench/timeline.svg $(BENCHFLAGS)

# The benchmark's peer: Dask (Debian's python3-dask, seen by /usr/bin/python3), installed with
# apt-get when no Python here imports it, then checked against a small corpus's exact counts.
# Not part of `make test`. DASK_PYTHON names another interpreter.
bench-peers: azurite
	@if ! for py in $${DASK_PYTHON:-} /usr/bin/python3 python3; do $$py -c 'import dask.bag, dask.distributed' 2>/dev/null && break; false; done; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq python3-dask python3-distributed; \
	  else echo "Dask is missing: apt-get install -y python3-dask python3-distributed (as root), or set DASK_PYTHON" >&2; exit 1; fi; \
	fi
	MAPAGG_DASK=1 $(GO) test -race -count=1 -run '^TestWordCorpus_Dask$$' ./internal/harness/corpus/

# Program jobs (docs/programs.md), the programs scenario of `make bench` alone: the word counts
# of examples/programs/wordcount.py and wordcount.sh through a 2-worker cluster beside one Python
# Counter process and one awk process over the same files, interleaved; wall and CPU-seconds.
# PROGRAM_BENCH_MB sets the corpus in MiB (default 174). Report in .bench/programs.{json,md}.
bench-programs: azurite
	@mkdir -p .bench
	$(GO) run ./cmd/loadtest --scenarios programs --programs-mb $${PROGRAM_BENCH_MB:-174} --json .bench/programs.json --markdown .bench/programs.md

# The fault matrix (cmd/chaos): one job with a known answer per fault on a 3-worker cluster of real
# processes (leader SIGKILL and SIGSTOP, nats-server and azurite-blob kill -9, azurite-queue down,
# all workers killed, forged/malformed results, garbage on the queue and streams, cancel during a
# failover); prints fault | verdict | result exact? | time lost | anything left behind and exits
# non-zero on any failure. A few minutes on 2 cores. Report in .chaos/.
# CHAOSFLAGS: go run ./cmd/chaos -h (CHAOSFLAGS=--quick: the cheap faults `make test` runs).
chaos: azurite nats-server
	@mkdir -p .chaos
	$(GO) run ./cmd/chaos --json .chaos/report.json --markdown .chaos/report.md $(CHAOSFLAGS)
	MAPAGG_PROGRAM_FAULTS=1 $(GO) test -race -count=1 -run '^TestPrograms_LeaderKilledInMapAndReduce$$' ./e2e/

clean:
	rm -rf $(BIN) .demo .bench .chaos
