# Entry points for people and CI. `make help` lists them.
SHELL := /usr/bin/env bash
CARGO ?= cargo
NEXTEST_PROFILE ?= $(if $(CI),ci,default)
FUZZ_SECONDS ?= 600
# `make quickstart QUICKSTART_ARGS='--nodes real'` installs what real nodes run too.
QUICKSTART_NODES := $(if $(findstring real,$(QUICKSTART_ARGS)),nodes)

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE ?= docker.io/library/kubeadm-providers:v$(VERSION)
# The release after this one (minor + 1), as the real management cluster's `clusterctl upgrade` goes to.
NEXT_VERSION := $(shell echo $(VERSION) | awk -F. '{print $$1 "." $$2 + 1 ".0"}')
IMAGES := $(CURDIR)/target/images

.PHONY: help quickstart quickstart-testenv quickstart-build dev test test-nodes e2e e2e-real testenv testenv-releases packages manifests check-manifests release-manifests build image lint fmt bench bench-rollout bench-upgrade bench-real bench-scale bench-snapshot soak compare fuzz

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

quickstart: ## Management plane, both managers, simulated machines and a 3 + 2 cluster; waits until it is ready (Ctrl-C stops it). Installs only what it runs (QUICKSTART_ARGS='--nodes real': real nodes)
	hack/install-testenv.sh --packages-only quickstart $(QUICKSTART_NODES)
	$(MAKE) --no-print-directory -j2 quickstart-testenv quickstart-build
	target/debug/quickstart $(QUICKSTART_ARGS)

# The two halves of `make quickstart`, run side by side once the Debian packages (protoc) are there: the
# Go builds of what the quickstart runs, and the Rust build of our managers and the quickstart.
quickstart-testenv:
	hack/install-testenv.sh quickstart $(QUICKSTART_NODES)

quickstart-build:
	$(CARGO) build -p kubeadm-bootstrap -p kubeadm-controlplane -p e2e-tests --bins

dev: testenv build ## Start a local management plane with our CRDs, Cluster API's core manager and both managers (Ctrl-C stops it); then `target/debug/sim run --core cluster-api --kubeconfig <printed> --dir .dev/sim`
	target/debug/testenv up --dir .dev --crds config/crd/bases --crds e2e/config/crd --cluster-api-core \
		--manager target/debug/bootstrap-manager --manager target/debug/controlplane-manager $(DEV_ARGS)

test: lint testenv ## What CI runs: make lint, then unit, integration and end-to-end tests (real etcd and kube-apiserver) with cargo nextest
	$(CARGO) nextest run --workspace --profile $(NEXTEST_PROFILE)

test-nodes: testenv-releases ## Real nodes piece by piece, beyond what `make test` runs of them: the node images of every release (kubeadm's list, built from Go modules) in a real containerd, and our init, control-plane join and worker bootstrap data and a published provider's shape (users, NTP, files, a missing disk) on systemd-nspawn nodes with a real kubelet, outside Cluster API (about 6 minutes)
	$(CARGO) nextest run -p testenv -p sim --profile $(NEXTEST_PROFILE) --run-ignored only

e2e-real: testenv-releases ## Scenarios on real nodes (systemd-nspawn, real cloud-init, containerd, kubelet) beyond the one `make test` runs: the quickstart's 3 + 2 shape, a generation rollout with the etcd watch and a powered-off node remediated, the upgrade chain 1.34 → 1.37, etcd restored from object storage (a failed restore first), and our image (`make image`) installed as pods by clusterctl into a management cluster of real nodes (about 60 minutes, 15 of them the image's release build; a second build as the next release, for `clusterctl upgrade`, takes 15 more the first time)
	mkdir -p $(IMAGES)
	$(MAKE) --no-print-directory image IMAGE=docker.io/library/kubeadm-providers:v$(NEXT_VERSION) RELEASE_VERSION=$(NEXT_VERSION) OCI_ARCHIVE=$(IMAGES)/kubeadm-providers-v$(NEXT_VERSION).tar
	$(MAKE) --no-print-directory image OCI_ARCHIVE=$(IMAGES)/kubeadm-providers-v$(VERSION).tar
	$(CARGO) build -p kubeadm-bootstrap -p kubeadm-controlplane
	$(CARGO) nextest run -p e2e-tests --profile $(NEXTEST_PROFILE) --run-ignored only -E 'test(/^real_nodes::|^real_management::/)' --no-capture

e2e: testenv ## End-to-end scenarios: both managers as processes, simulated machines running real etcd + kube-apiserver
	$(CARGO) build -p kubeadm-bootstrap -p kubeadm-controlplane
	mkdir -p target
	set -o pipefail; status=0; \
	$(CARGO) nextest run -p e2e-tests --profile $(NEXTEST_PROFILE) --no-capture 2>&1 | tee target/e2e.log || status=$$?; \
	echo "$$(grep -cE '^ +PASS ' target/e2e.log) passed, $$(grep -cE '^ +(FAIL|TIMEOUT|SIGSEGV|SIGABRT|SIGKILL) ' target/e2e.log) failed"; \
	exit $$status

testenv: ## Install the Debian packages, cargo-nextest, rustfmt and clippy; build kube-apiserver, kubeadm, etcd, Cluster API and what real nodes run (kubelet, containerd's images, ...) once (cached in ~/.cache)
	hack/install-testenv.sh nodes

testenv-releases: ## What make testenv installs, and the node components of every other release real nodes run (hack/tools/k8s-node-1.N)
	hack/install-testenv.sh nodes node-releases

packages: ## Only the Debian packages (protoc, make, ...), rustfmt and clippy: what the Rust build and make lint need
	hack/install-testenv.sh --packages-only

manifests: ## Regenerate config/{crd/bases,webhook,certmanager,rbac,manager,default}, e2e/config/crd and the reference pages on annotations, conditions and Events from the Rust types
	$(CARGO) run -q -p xtask -- crdgen .

check-manifests: ## Fail when generated manifests are stale
	$(CARGO) run -q -p xtask -- crdgen --check .

release-manifests: ## Write the clusterctl local repository of this version to out/ (components, metadata.yaml, templates)
	$(CARGO) run -q -p xtask -- release-manifests --out out .

build: ## Build both managers and the test environment
	$(CARGO) build -p kubeadm-bootstrap -p kubeadm-controlplane -p testenv -p sim

compare: testenv ## Our managers and Cluster API's own kubeadm managers through the same scenarios, one table (a benchmark, about 45 minutes; COMPARE_SIDES, COMPARE_IDLE_SECONDS, COMPARE_FAULT_SECONDS)
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	$(CARGO) build -p e2e-tests --bin compare
	BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		target/debug/compare

bench-rollout: testenv ## Generation rollouts of 3 (and 5) control-plane machines on simulated machines, release builds of both managers: wall time against the sum of the joins, and the idle gaps between steps (BENCH_ROLLOUTS, default 5; BENCH_GAPS_OVER_MS; about 15 minutes)
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		$(CARGO) bench --profile dev -p e2e-tests --bench rollout

bench-upgrade: testenv ## Minor upgrades 1.34 → 1.35 → 1.36 → 1.37 of 3 control-plane machines on simulated machines running their release, release builds of both managers: each step's wall time against the sum of its joins, its idle gaps, the longest workload API gap, the managers' peak memory (about 10 minutes)
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	BENCH_UPGRADE=1 BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		$(CARGO) bench --profile dev -p e2e-tests --bench rollout

bench-real: testenv ## Real nodes: the quickstart's 3 + 2 shape with each node's boot broken down (cloud-init stages, the image import, each kubeadm phase, the etcd member added, started, promoted; Node Ready) and its memory, then a generation rollout of the 3 control-plane nodes measured as bench-rollout measures it (BENCH_ROLLOUTS, default 1; about 12 minutes)
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	BENCH_NODES=real BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		$(CARGO) bench --profile dev -p e2e-tests --bench rollout

bench-scale: testenv ## Both managers with 100, 300 and 1,000 simulated clusters: creation, scaling, and at rest requests/s, writes, CPU against the API server's, RSS; a table and docs/src/images/scale.png (BENCH_SCALE_N, BENCH_SCALE_REST_SECONDS, BENCH_SCALE_PER_WORKLOAD; about 2 hours)
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		$(CARGO) bench --profile dev -p e2e-tests --bench scale
	test -x target/plot-venv/bin/python || (python3 -m venv target/plot-venv && target/plot-venv/bin/pip install -q matplotlib)
	mkdir -p docs/src/images
	target/plot-venv/bin/python hack/plot-scale.py target/bench-scale.csv docs/src/images/scale.png

soak: testenv ## Seeded crash trials of create 1, scale 3, 5 (a joiner cut off the network), 3, a rollout and a remediation, managers killed at random; a table of trials, kills and partitions, exit 1 naming the seeds that failed (SOAK_TRIALS, default 50; SOAK_SEED; SOAK_MINUTES, default 360; about 5 minutes per trial)
	$(CARGO) build -p kubeadm-bootstrap -p kubeadm-controlplane
	$(CARGO) bench --profile dev -p e2e-tests --bench soak

bench-snapshot: testenv ## etcd backup to object storage at 256 MiB and 1 GiB (BENCH_SNAPSHOT_MIB): the manager's streamed snapshot + upload (release build), plain and sealed, against etcdctl snapshot save + a curl upload, peak memory, and a restore's read-back check; then a 1 GiB etcd (BENCH_RESTORE_MIB) of 3 simulated control-plane machines backed up by the release managers, every machine lost and restored from the store to 3 voters (about 25 minutes)
	$(CARGO) build --release -p kubeadm-controlplane --example snapshot_upload
	$(CARGO) build --release -p kubeadm-bootstrap -p kubeadm-controlplane
	SNAPSHOT_UPLOAD=$(CURDIR)/target/release/examples/snapshot_upload \
		$(CARGO) bench --profile dev -p e2e-tests --bench snapshot
	BOOTSTRAP_MANAGER=$(CURDIR)/target/release/bootstrap-manager CONTROLPLANE_MANAGER=$(CURDIR)/target/release/controlplane-manager \
		$(CARGO) bench --profile dev -p e2e-tests --bench restore

bench: ## Benchmarks (render, webhook latency, 100 control planes), numbers printed, nothing asserted
	$(CARGO) bench -p kubeadm-bootstrap --bench render
	$(CARGO) bench -p kubeadm-webhook --bench admission
	$(CARGO) bench -p kubeadm-controlplane --bench reconcile

fuzz: ## Coverage-guided fuzzing (cargo-fuzz, nightly) of render, validate, conversion, webhook reviews, variables and the Ignition merge, FUZZ_SECONDS each (default 600); a table of executions and crashes
	CARGO=$(CARGO) FUZZ_SECONDS=$(FUZZ_SECONDS) hack/fuzz.sh

image: ## Build the container image with both managers (docker.io/library/kubeadm-providers:v<version>, as the release manifests name it) FROM scratch over the Debian packages they link against, with buildah, podman or docker (CONTAINER_ENGINE; Debian's buildah is installed when none is); prints its size and user. OCI_ARCHIVE=path also writes it as an OCI archive; RELEASE_VERSION=X.Y.Z builds the managers as that release (in a target folder of their own)
	CARGO=$(CARGO) CONTAINER_ENGINE=$(CONTAINER_ENGINE) OCI_ARCHIVE=$(OCI_ARCHIVE) RELEASE_VERSION=$(RELEASE_VERSION) hack/image.sh $(IMAGE)

lint: packages ## rustfmt, clippy on every target (tests, benches, binaries) and on the fuzz targets (their own workspace, built on stable); warnings are errors
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --locked --bins -- -D warnings

fmt: ## Format the code, the fuzz targets too
	$(CARGO) fmt --all
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --all
