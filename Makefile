# One-command entry points. `make test` is what CI runs (.ci/run).
GO        ?= go
BIN       := bin
AZURITE   := Azurite/node_modules/.bin/azurite-blob
GOTESTFLAGS ?=

.PHONY: all build test vet azurite clean fuzz

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Azurite's npm packages (pinned in Azurite/package-lock.json), installed when absent.
azurite: $(AZURITE)
$(AZURITE): Azurite/package.json Azurite/package-lock.json
	npm ci --prefix Azurite --no-audit --no-fund --loglevel=error
	@touch $@

vet:
	$(GO) vet ./...

test: azurite vet
	$(GO) test -race -timeout 15m $(GOTESTFLAGS) ./...

# Short fuzz runs of every decoder of outside input (FUZZTIME per target).
FUZZTIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf $(BIN)
