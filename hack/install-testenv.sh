#!/usr/bin/env bash
# Installs the real parts the tests run against:
#   - Debian packages: etcd 3.4 (server + etcdctl), Go (to build the apiserver), cloud-init (schema checks,
#     and real cloud-init in nodes booted with systemd-nspawn, from systemd-container), protoc (the
#     etcd-client crate compiles etcd's protobufs), make;
#   - the cargo tools `make test` runs: cargo-nextest (`cargo install --locked` when missing), rustfmt and
#     clippy (rustup components);
#   - kube-apiserver and kubeadm v1.20.2, built from Debian bookworm's `kubernetes` source package, because no
#     registry reachable here ships the binaries. The build is cached outside the repository and reused;
#   - ignition-check and go-template (hack/tools/cmd), built with the machine's own Go (>= 1.22, the `go` first
#     on PATH) from modules of the Go module proxy, cached under a hash of their sources so a change rebuilds;
#   - the current releases, from Go modules the same way: kube-apiserver and kubeadm of k8s.io/kubernetes
#     (hack/tools/k8s) and etcd, etcdctl, etcdutl of go.etcd.io/etcd (hack/tools/etcd), plus kubeadm 1.30
#     as `kubeadm-v1beta3` (hack/tools/k8s-v1beta3), which reads the kubeadm API v1beta3 configurations
#     written for Kubernetes < 1.31, and Cluster API's own managers and clusterctl of sigs.k8s.io/cluster-api
#     (hack/tools/capi) with the CRDs and webhook manifests of that module, and kustomize
#     (hack/tools/kustomize), which builds Cluster API's providers' components from them, and clusterctl-envsubst
#     (hack/tools/envsubst: clusterctl's own template processor, which `generate cluster` is compared with
#     in the tests), and versitygw (hack/tools/versitygw: an S3 server over a folder, the object store of the
#     etcd snapshot tests); and the other releases a
#     simulated node runs when its Machine says so: kube-apiserver and kubeadm of each hack/tools/k8s-1.N,
#     etcd, etcdctl and etcdutl of each hack/tools/etcd-3.N. Their versions are pinned in those go.mod files only. A module version the proxy does not serve is reported and skipped
#     (the Debian etcd 3.4 and kube-apiserver 1.20 above stay the fallback); any other failure is an error.
#
# Usage: hack/install-testenv.sh [--packages-only] [all|quickstart] [nodes] [node-releases]
#   all (default)    everything above: what `make test`, `make e2e`, `make dev` and the benchmarks run.
#   nodes            besides all (or quickstart: `quickstart --nodes real`), what real nodes run
#                    (systemd-nspawn machines booting with real cloud-init): systemd-container, cloud-init,
#                    Debian's containerd, runc, CNI plugins, nftables and iptables, and
#                    from Go modules the node components of the release in hack/tools/k8s (hack/tools/k8s-node:
#                    kubelet, kube-controller-manager, kube-scheduler, kube-proxy and a pause program of ours)
#                    and CoreDNS (hack/tools/coredns), at the versions kubeadm of that release deploys.
#   node-releases    besides all and nodes, the node components of every other release (hack/tools/k8s-node-1.N:
#                    kubelet, kube-controller-manager, kube-scheduler, kube-proxy) and the CoreDNS its kubeadm
#                    deploys (hack/tools/coredns-1.N), for real nodes whose Machine runs that release (`make
#                    e2e-real`'s upgrade chain); about 2 minutes each with a warm Go cache.
#   quickstart       only what `make quickstart` runs: protoc, make, iproute2 and kubectl from Debian, and
#                    from hack/tools the newest release, which the management plane and the simulated machines
#                    run (kube-apiserver and kubeadm of the last k8s-1.N, etcd of the last etcd-3.N),
#                    sim-kubelet (k8s), and Cluster API's core manager with its manifests, and clusterctl
#                    (capi; the manager has no version flag, so testenv asks the clusterctl beside it which
#                    release it is); with `nodes`, also what real nodes run at the release of hack/tools/k8s
#                    (its kube-apiserver and kubeadm, etcd). Not the kubernetes 1.20 fallback, Debian's etcd,
#                    cloud-init, ignition-check, go-template, kubeadm-v1beta3, kustomize, the other releases
#                    nor Cluster API's kubeadm managers: the quickstart runs none of them, and they are half
#                    of the build. A module the proxy does not serve is an error here, since no fallback is
#                    built.
#   --packages-only  only the Debian packages of that set and rustfmt and clippy: what the Rust build and
#                    `make lint` need, so that the cargo build can start next to the Go builds.
# The builds run as jobs (their lines prefixed with the job's name), side by side where there are cores
# for it: each Go build already keeps 2 cores busy, and on 2 cores the quickstart's three Go jobs took
# 444 s side by side against 394 s one after the other (ab2d7f9).
#
# Idempotent: a second run checks, prints what it found and exits in well under a second.
# Environment:
#   KUBEADM_PROVIDERS_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kubeadm-providers)
#   SKIP_APT=1                never call apt-get (fail instead when a package is missing)
#   SKIP_CURRENT=1            do not build kubernetes 1.34 / etcd 3.6 / kubeadm 1.30 / Cluster API from hack/tools/k8s*,
#                             etcd, capi
#   TESTENV_JOBS=N            at most N builds at once (default: one per 2 cores and per 2 GiB of available memory,
#                             at most 4; a Go build of kubernetes takes about 1.3 GB and keeps 2 cores busy)
#   TESTENV_MIN_FREE_GIB=N    when less than N GiB of disk are free at the end, drop what the tests do not run:
#                             Go's build and module caches and cached builds of other sources (earlier checkouts)
#
# The build functions run as jobs (queue_job), which shellcheck does not follow:
# shellcheck disable=SC2317
set -euo pipefail

CACHE_ROOT="${KUBEADM_PROVIDERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeadm-providers}"
KUBE_VERSION="v1.20.2"
# Bump when the build recipe changes, so machines with an older cached build rebuild.
RECIPE="r3"
KUBE_DIR="$CACHE_ROOT/kubernetes-$KUBE_VERSION-$RECIPE"
# What both sets need: protoc for the Rust build (etcd-client), make for the Makefile (a fresh machine may
# lack it), iproute2 for the simulated machines' network namespaces, certificates for the Go module proxy.
QUICKSTART_PACKAGES=(protobuf-compiler make iproute2 ca-certificates)
# What only the tests run: etcd 3.4, Go 1.19 and reflect2 for the kubernetes 1.20 build (dpkg-dev for
# `apt-get source`), cloud-init (its schema checks, and real cloud-init in systemd-nspawn nodes), openssl
# checking our certificates and opening sealed snapshots, curl downloading a snapshot to restore as a
# node does.
TEST_PACKAGES=(etcd-server etcd-client golang-go golang-github-modern-go-reflect2-dev cloud-init systemd-container dpkg-dev openssl curl)
# What real nodes run besides our builds and systemd-nspawn: the container runtime and its CRI plugin
# (containerd 1.6), runc, the bridge and host-local CNI plugins, and the packet filters kube-proxy drives.
NODE_PACKAGES=(containerd runc containernetworking-plugins nftables iptables cloud-init systemd-container)
REFLECT2_FIX=/usr/share/gocode/src/github.com/modern-go/reflect2

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_SRC="$REPO_ROOT/hack/tools"
CURRENT_K8S_SRC="$TOOLS_SRC/k8s"
CURRENT_ETCD_SRC="$TOOLS_SRC/etcd"
KUBEADM_V1BETA3_SRC="$TOOLS_SRC/k8s-v1beta3"
CAPI_SRC="$TOOLS_SRC/capi"
KUSTOMIZE_SRC="$TOOLS_SRC/kustomize"
# clusterctl's own template processor, which `generate cluster` is compared with (hack/tools/envsubst).
ENVSUBST_SRC="$TOOLS_SRC/envsubst"
# The S3-compatible object store the etcd snapshot tests write to (hack/tools/versitygw).
VERSITYGW_SRC="$TOOLS_SRC/versitygw"
K8S_NODE_SRC="$TOOLS_SRC/k8s-node"
# The other releases a simulated node runs when its Machine says so (hack/tools/k8s-1.N: kube-apiserver and
# kubeadm; hack/tools/etcd-3.N: etcd, etcdctl, etcdutl), in version order.
RELEASE_K8S_SRCS=()
RELEASE_ETCD_SRCS=()
while read -r dir; do RELEASE_K8S_SRCS+=("$dir"); done < <(ls -d "$TOOLS_SRC"/k8s-1.* 2>/dev/null | sort -V)
while read -r dir; do RELEASE_ETCD_SRCS+=("$dir"); done < <(ls -d "$TOOLS_SRC"/etcd-3.* 2>/dev/null | sort -V)
# The node components of those releases (hack/tools/k8s-node-1.N) and the CoreDNS their kubeadm deploys
# (hack/tools/coredns-1.N), for real nodes of them.
RELEASE_K8S_NODE_SRCS=()
RELEASE_COREDNS_SRCS=()
while read -r dir; do RELEASE_K8S_NODE_SRCS+=("$dir"); done < <(ls -d "$TOOLS_SRC"/k8s-node-1.* 2>/dev/null | sort -V)
while read -r dir; do RELEASE_COREDNS_SRCS+=("$dir"); done < <(ls -d "$TOOLS_SRC"/coredns-1.* 2>/dev/null | sort -V)
COREDNS_SRC="$TOOLS_SRC/coredns"
# Bump when the build recipe of hack/tools/k8s or hack/tools/etcd (flags, checks) changes: part of their hash.
CURRENT_RECIPE="c2"
# The oldest Go that builds hack/tools (its go.mod says `go 1.22`).
TOOLS_GO_MIN_MINOR=22

started=$(date +%s)
say() { printf '[install-testenv %3ss] %s\n' "$(($(date +%s) - started))" "$*"; }
die() { printf '[install-testenv] error: %s\n' "$*" >&2; exit 1; }

PACKAGES_ONLY=0
MODE=all
# `nodes` adds the real nodes' parts to either; `node-releases` those of every release too.
NODES=0
NODE_RELEASES=0
for arg in "$@"; do
  case "$arg" in
    --packages-only) PACKAGES_ONLY=1 ;;
    all | quickstart) MODE="$arg" ;;
    nodes) NODES=1 ;;
    node-releases) NODES=1 NODE_RELEASES=1 ;;
    *) die "unknown argument '$arg'; usage: hack/install-testenv.sh [--packages-only] [all|quickstart] [nodes] [node-releases]" ;;
  esac
done
[ "$MODE" = all ] || [ "$NODE_RELEASES" = 0 ] || die "node-releases goes with all (the other releases' kube-apiserver and kubeadm), not $MODE"
if [ "$MODE" = quickstart ]; then
  APT_PACKAGES=("${QUICKSTART_PACKAGES[@]}")
else
  APT_PACKAGES=("${QUICKSTART_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
fi
[ "$NODES" = 0 ] || APT_PACKAGES+=("${NODE_PACKAGES[@]}")

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root to run: $* (run this script as root or install sudo)"; fi
}

missing_packages() {
  local p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

ensure_packages() {
  local missing
  missing=$(missing_packages | tr '\n' ' ')
  if [ -z "${missing// /}" ]; then
    say "Debian packages present: ${APT_PACKAGES[*]}"
    return
  fi
  [ "${SKIP_APT:-0}" = 1 ] && die "missing Debian packages: $missing (SKIP_APT=1 is set; install them with apt-get)"
  say "installing Debian packages: $missing"
  as_root apt-get update -q
  # shellcheck disable=SC2086
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
  say "Debian packages installed"
}

ensure_deb_src() {
  if grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ || grep -qs '^deb-src ' /etc/apt/sources.list; then
    return
  fi
  [ "${SKIP_APT:-0}" = 1 ] && die "no deb-src line for bookworm main; add one to /etc/apt/sources.list.d/ (SKIP_APT=1 is set)"
  say "enabling Debian source packages (bookworm main deb-src)"
  as_root tee /etc/apt/sources.list.d/kubeadm-providers-debsrc.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  as_root apt-get update -q
}

# The Makefile of kubernetes 1.20 generates pkg/generated/openapi; the source package does not ship it.
# Same selection as build/root/Makefile.generated_files: Go files with a `// +k8s:` tag that mention
# `+k8s:openapi-gen=`, staging paths named as their vendor/ equivalents.
openapi_input_dirs() {
  find -H . \( -path ./_\* -o -path ./.\* -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
    | sed 's|^\./||; s|^staging/src|vendor|' \
    | while read -r f; do
        real="$f"
        case "$f" in vendor/k8s.io/*) real="staging/src/${f#vendor/}" ;; esac
        printf '%s\t%s\n' "$f" "$real"
      done \
    | awk -F'\t' '{print $2 "\t" $1}' \
    | grep -v -e $'\tvendor/k8s.io/code-generator/' -e $'\tvendor/k8s.io/sample-apiserver/' \
    | while IFS=$'\t' read -r real named; do
        if grep -q '^// *+k8s:' "$real" && grep -q '+k8s:openapi-gen=' "$real"; then dirname "$named"; fi
      done \
    | LC_ALL=C sort -u
}

# Kubernetes 1.20 builds in GOPATH mode with the Go of Debian bookworm (1.19). A newer Go first on PATH
# (a machine's own toolchain) is not used for it.
DEBIAN_GO_BIN=/usr/lib/go-1.19/bin

build_kubernetes() {
  [ -x "$DEBIAN_GO_BIN/go" ] || die "$DEBIAN_GO_BIN/go not found: install golang-go (Debian bookworm's Go 1.19)"
  export PATH="$DEBIAN_GO_BIN:$PATH"
  go version | grep -q 'go1\.19' || die "expected Debian's Go 1.19 for the kubernetes 1.20 build, got: $(go version)"
  [ -d "$REFLECT2_FIX" ] || die "$REFLECT2_FIX missing: install golang-github-modern-go-reflect2-dev"
  ensure_deb_src

  mkdir -p "$CACHE_ROOT"
  local work
  work=$(mktemp -d "$CACHE_ROOT/build.XXXXXX")
  # A failed or interrupted build leaves nothing in the cache but this temp folder, which is removed.
  trap 'rm -rf "$work"' EXIT

  say "fetching the kubernetes source package (apt-get source)"
  (cd "$work" && apt-get source -q kubernetes >"$work/apt-source.log" 2>&1) \
    || { tail -20 "$work/apt-source.log" >&2; die "apt-get source kubernetes failed (is the deb-src line for bookworm present?)"; }
  local src
  src=$(find "$work" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)
  [ -n "$src" ] || die "apt-get source kubernetes produced no source tree"

  say "replacing vendored modern-go/reflect2 1.0.1 (crashes under Go >= 1.18) with Debian's 1.0.2"
  rm -rf "$src/vendor/github.com/modern-go/reflect2"
  cp -r "$REFLECT2_FIX" "$src/vendor/github.com/modern-go/reflect2"
  # The OpenAPI type validator asks "is this value null?" with reflect.DeepEqual(reflect.Zero(T),
  # reflect.ValueOf(v)), which compares two reflect.Value headers. Since Go 1.19 an empty string boxed in
  # an interface and reflect.Zero(string) share the runtime's zero buffer, so every "" in a custom object
  # (e.g. the label `node-role.kubernetes.io/control-plane: ""`) is rejected as null. Only nil is null.
  say "fixing the OpenAPI validators' null check for Go >= 1.19"
  local validator
  for validator in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
    grep -q 'data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))' "$src/$validator" \
      || die "$validator does not contain the expected null check; the source package changed"
    sed -i 's/data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))/data == nil/' "$src/$validator"
  done

  export GOPATH="$work/gopath" GO111MODULE=off GOPROXY=off CGO_ENABLED=0 GOFLAGS=
  export GOCACHE="$CACHE_ROOT/go-build-cache"
  mkdir -p "$GOPATH/src/k8s.io"
  ln -s "$src" "$GOPATH/src/k8s.io/kubernetes"
  cd "$GOPATH/src/k8s.io/kubernetes"

  say "building openapi-gen"
  go build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  local dirs
  dirs=$(openapi_input_dirs | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  say "generating pkg/generated/openapi from $(echo "$dirs" | tr ',' '\n' | wc -l) packages"
  "$work/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h hack/boilerplate/boilerplate.generatego.txt -r "$work/violations.report" \
    >"$work/openapi-gen.log" 2>&1 || { tail -20 "$work/openapi-gen.log" >&2; die "openapi-gen failed"; }
  [ -s pkg/generated/openapi/zz_generated.openapi.go ] || die "openapi-gen wrote no pkg/generated/openapi"

  local v=k8s.io/kubernetes/vendor/k8s.io ldflags="-s -w"
  for pkg in component-base/version client-go/pkg/version; do
    ldflags+=" -X $v/$pkg.gitVersion=$KUBE_VERSION -X $v/$pkg.gitMajor=1 -X $v/$pkg.gitMinor=20"
    ldflags+=" -X $v/$pkg.gitTreeState=clean -X $v/$pkg.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$work/bin"
  say "building kube-apiserver (about 5 minutes and 1.3 GB of memory on 2 cores when cold)"
  go build -ldflags "$ldflags" -o "$work/bin/kube-apiserver" ./cmd/kube-apiserver
  say "building kubeadm"
  go build -ldflags "$ldflags" -o "$work/bin/kubeadm" ./cmd/kubeadm
  "$work/bin/kube-apiserver" --version | grep -q "$KUBE_VERSION" || die "built kube-apiserver does not report $KUBE_VERSION"

  cd /
  rm -rf "$KUBE_DIR.tmp"
  mkdir -p "$KUBE_DIR.tmp"
  mv "$work/bin" "$KUBE_DIR.tmp/bin"
  rm -rf "$KUBE_DIR"
  mv "$KUBE_DIR.tmp" "$KUBE_DIR"
  rm -rf "$work"
  trap - EXIT
  say "kube-apiserver and kubeadm $KUBE_VERSION cached in $KUBE_DIR/bin"
}

# Where hack/tools builds to: a short hash of its go.mod, go.sum and the sources under cmd/ (with their
# paths), so an edit or a version bump builds into a new folder.
tools_dir() {
  local hash
  hash=$(cd "$TOOLS_SRC" && {
    for f in go.mod go.sum; do printf '%s\n' "$f"; cat "$f"; done
    find cmd -type f | LC_ALL=C sort | while read -r f; do printf '%s\n' "$f"; cat "$f"; done
  } | sha256sum | cut -c1-12)
  echo "$CACHE_ROOT/tools-$hash"
}

# Go as hack/tools is built with: go.mod/go.sum as committed, no go.work, no toolchain download.
tools_go() {
  (cd "$TOOLS_SRC" && env GOFLAGS=-mod=readonly GOCACHE="$CACHE_ROOT/go-build-cache" GOWORK=off GOTOOLCHAIN=local \
    CGO_ENABLED=0 go "$@")
}

# Puts the machine's own Go first on PATH and checks it is at least 1.<min_minor>; sets GO_BIN and GO_VERSION.
# Usage: use_machine_go MIN_MINOR WHAT (WHAT names the module in messages, e.g. hack/tools).
use_machine_go() {
  local min_minor="$1" what="$2" minor
  # A machine whose own Go is not first on PATH (e.g. Debian's 1.19 installed above for the 1.20 build):
  # use the machine's Go from its usual place.
  minor=$(go env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p') || true
  if { [ -z "$minor" ] || [ "$minor" -lt "$min_minor" ]; } && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  GO_BIN=$(command -v go) || die "go not found on PATH: $what needs Go >= 1.$min_minor (put the machine's Go, e.g. /usr/local/go/bin, first on PATH)"
  GO_VERSION=$(go env GOVERSION 2>/dev/null) || die "$GO_BIN env GOVERSION failed"
  minor=$(printf '%s' "$GO_VERSION" | sed -nE 's/^go1\.([0-9]+).*/\1/p')
  [ -n "$minor" ] && [ "$minor" -ge "$min_minor" ] \
    || die "$what needs Go >= 1.$min_minor, but the go first on PATH ($GO_BIN) is $GO_VERSION; put a newer Go first on PATH"
}

build_ignition_check() {
  local dir="$1" go_bin go_version
  use_machine_go "$TOOLS_GO_MIN_MINOR" hack/tools
  go_bin=$GO_BIN go_version=$GO_VERSION
  [ -f "$TOOLS_SRC/go.mod" ] && [ -f "$TOOLS_SRC/go.sum" ] || die "$TOOLS_SRC/go.mod or go.sum missing"

  mkdir -p "$CACHE_ROOT"
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/bin"
  local log="$dir.tmp/build.log" t0
  t0=$(date +%s)
  say "building ignition-check with $go_version ($go_bin) into $dir/bin"
  if ! tools_go build -trimpath -buildvcs=false -o "$dir.tmp/bin/ignition-check" ./cmd/ignition-check >"$log" 2>&1; then
    tail -20 "$log" >&2
    # A build error names the importing file, not the module; `go mod download` names the module it cannot get.
    tools_go mod download >>"$log" 2>&1 || true
    # Name the modules Go could not get: "M@vX: ...", "module M: ...", "missing go.sum entry for module providing package P".
    local modules
    modules=$( { sed -nE 's/^(go: )?([^ ]+@v[^ :]+): .*/\2/p' "$log"
                 sed -nE 's/.*[^a-z]module ([^ :]+): .*/\1/p' "$log"
                 sed -nE 's/.*missing go\.sum entry for module providing package ([^ ;]+).*/the one providing \1 (no go.sum entry)/p' "$log"
               } | LC_ALL=C sort -u | paste -sd',' - | sed 's/,/, /g') || true
    local not_tidy=0
    grep -q 'updates to go.mod needed' "$log" && not_tidy=1
    rm -rf "$dir.tmp"
    if [ -n "$modules" ]; then
      die "building ignition-check failed: Go could not get module(s): $modules (GOPROXY=$(go env GOPROXY): is the Go module proxy reachable? A module without a go.sum entry needs 'go mod tidy' in hack/tools)"
    fi
    [ "$not_tidy" = 1 ] \
      && die "building ignition-check failed: hack/tools/go.mod does not list every module it needs (GOFLAGS=-mod=readonly); run 'go mod tidy' in hack/tools"
    die "building ignition-check in $TOOLS_SRC failed (log above)"
  fi
  printf '{"ignition":{"version":"2.3.0"}}' | "$dir.tmp/bin/ignition-check" validate >/dev/null \
    || { rm -rf "$dir.tmp"; die "the built ignition-check does not validate a minimal Ignition 2.3 config"; }
  # go-template (standard library only) renders file templates with Go's text/template for comparison.
  if ! tools_go build -trimpath -buildvcs=false -o "$dir.tmp/bin/go-template" ./cmd/go-template >"$log" 2>&1; then
    tail -20 "$log" >&2
    rm -rf "$dir.tmp"
    die "building go-template in $TOOLS_SRC failed (log above)"
  fi
  [ "$(printf 'v={{ .controlPlane.version }}' | "$dir.tmp/bin/go-template" --control-plane-version v1.35.0)" = v=v1.35.0 ] \
    || { rm -rf "$dir.tmp"; die "the built go-template does not render a minimal template"; }
  rm -f "$log"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  say "ignition-check and go-template built in $(($(date +%s) - t0))s, cached in $dir/bin"
}

# --- The current releases, from Go modules: hack/tools/k8s and k8s-v1beta3 (kubernetes), hack/tools/etcd. ---

# The version module $2 is required at in $1/go.mod (a `require M V` line or a line of a require block).
required_version() {
  awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1/go.mod"
}

# The minor version of the `go 1.N[.P]` line of $1/go.mod: the oldest Go that builds the module.
go_min_minor() {
  sed -nE 's/^go 1\.([0-9]+)(\.[0-9]+)?$/\1/p' "$1/go.mod" | head -1
}

# Where the module in $1 builds to: tools-<name>-<hash of the recipe, go.mod, go.sum and cmd/ if any>.
current_dir() {
  local src="$1" name="$2" hash
  [ -f "$src/go.mod" ] && [ -f "$src/go.sum" ] || die "$src/go.mod or go.sum missing"
  hash=$(cd "$src" && {
    printf 'recipe %s\n' "$CURRENT_RECIPE"
    for f in go.mod go.sum; do printf '%s\n' "$f"; cat "$f"; done
    [ ! -d cmd ] || find cmd -type f | LC_ALL=C sort | while read -r f; do printf '%s\n' "$f"; cat "$f"; done
  } | sha256sum | cut -c1-12)
  echo "$CACHE_ROOT/tools-$name-$hash"
}

# Go as in tools_go, for the module in $1.
module_go() {
  local src="$1"
  shift
  (cd "$src" && env GOFLAGS=-mod=readonly GOCACHE="$CACHE_ROOT/go-build-cache" GOWORK=off GOTOOLCHAIN=local \
    CGO_ENABLED=0 go "$@")
}

# The proxy's answers for a module version it does not serve.
NOT_SERVED='403 Forbidden|404 Not Found|410 Gone|not available|not found|unknown revision|invalid version'

# Downloads every module the module in $1 builds from. When the proxy does not serve some, names each
# (module@version) and returns 1; any other failure (network, checksum, go.sum not tidy) ends the script.
download_modules() {
  local src="$1" log="$2" failed other
  module_go "$src" mod download -json >"$log" 2>&1 && return 0
  # `go mod download -json` reports each module it could not get as {"Path": M, "Version": V, "Error": E}; a
  # failure while loading the module graph is a line "go: M@V: E" instead.
  failed=$( { awk -F'"' '/^\t"Path": /{ p = $4 } /^\t"Version": /{ v = $4 }
                /^\t"Error": /{ e = $0; sub(/^\t"Error": "/, "", e); sub(/",?$/, "", e); print p "@" v "\t" e }' "$log"
              sed -nE 's/^(go: )?([^ "]+@v[^ :"]+): (.*)/\2\t\3/p' "$log"
            } | LC_ALL=C sort -u) || true
  if [ -z "$failed" ]; then
    tail -20 "$log" >&2
    grep -q 'updates to go\.\(mod\|sum\) needed\|missing go\.sum entry' "$log" \
      && die "go mod download in $src failed: go.mod/go.sum are not tidy; run 'go mod tidy' in ${src#"$REPO_ROOT"/}"
    die "go mod download in $src failed (log above)"
  fi
  other=$(printf '%s\n' "$failed" | grep -vE "$NOT_SERVED") || true
  if [ -n "$other" ]; then
    printf '%s\n' "$other" | sed 's/\\n\\t/ /g; s/^/  /' >&2
    die "go mod download in $src failed for the module(s) above (GOPROXY=$(go env GOPROXY)); they are not reported as missing by the proxy, so this is an error"
  fi
  printf '%s\n' "$failed" | while IFS=$'\t' read -r module error; do
    say "  not served by the Go module proxy: $module ($(printf '%s' "$error" | sed -E 's/\\n\\t.*//; s/^[^ ]+@v[^ :]+: //'))"
  done
  return 1
}

# Starts the build of the module in $1 into $2.tmp/bin: downloads every module it needs. Returns 1, having
# said "skipped $3: … $4", when the proxy does not serve one of them (an error in quickstart mode, which
# builds no fallback). $5 is how long the build takes when cold, said before it starts.
prepare_current() {
  local src="$1" dir="$2" what="$3" instead="$4" takes="$5"
  mkdir -p "$CACHE_ROOT"
  rm -rf "$dir.tmp"
  # What an earlier run built there stays: the quickstart builds only some of Cluster API's binaries, and a
  # later full run adds the others.
  if [ -d "$dir" ]; then cp -a "$dir" "$dir.tmp"; fi
  mkdir -p "$dir.tmp/bin"
  say "$what (${src#"$REPO_ROOT"/}): downloading its modules, then building ($takes when cold)"
  if ! download_modules "$src" "$dir.tmp/download.log"; then
    rm -rf "$dir.tmp"
    [ "$MODE" = quickstart ] \
      && die "$what: a module it needs is not served by the Go module proxy (named above), and the quickstart builds no fallback; run hack/install-testenv.sh without 'quickstart' to build kube-apiserver 1.20 on Debian's etcd 3.4 instead"
    say "skipped $what: a module it needs is not served (Go names the first it cannot get); $instead"
    return 1
  fi
  rm -f "$dir.tmp/download.log"
}

# go build ./cmd/$3 (or the package $5) of the module in $1 into $2/bin/$3 with -ldflags $4; notes the time
# in $2/build.txt.
go_build() {
  local src="$1" out="$2" bin="$3" ldflags="$4" pkg="${5:-./cmd/$3}" log="$2/build-$3.log" t0 secs
  t0=$(date +%s)
  say "building $bin with $GO_VERSION ($GO_BIN)"
  if ! module_go "$src" build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/bin/$bin" "$pkg" >"$log" 2>&1; then
    tail -30 "$log" >&2
    rm -rf "$out"
    grep -q 'updates to go\.mod needed\|missing go\.sum entry' "$log" \
      && die "building $bin failed: ${src#"$REPO_ROOT"/}/go.mod does not list every module it needs; run 'go mod tidy' there"
    die "building $bin in $src failed (log above; all its modules were downloaded, so the build itself failed)"
  fi
  rm -f "$log"
  secs=$(($(date +%s) - t0))
  printf '%s built in %ss with %s\n' "$bin" "$secs" "$GO_VERSION" >>"$out/build.txt"
  say "$bin built in ${secs}s ($(du -h "$out/bin/$bin" | cut -f1))"
}

# Moves the finished build $1.tmp to $1.
finish_current() {
  rm -rf "$1"
  mv "$1.tmp" "$1"
}

# The binaries $3... (kube-apiserver, kubeadm*) of the k8s.io/kubernetes version required in the Go module
# $2 (hack/tools/k8s, hack/tools/k8s-v1beta3), into $1/bin.
build_k8s_module() {
  local dir="$1" src="$2" version staging bad ldflags pkg out want bin rel
  shift 2
  rel=${src#"$REPO_ROOT"/}
  version=$(required_version "$src" k8s.io/kubernetes)
  [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "$src/go.mod: no k8s.io/kubernetes v1.N.P requirement (found '$version')"
  local major=1 minor="${BASH_REMATCH[1]}"
  staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
  # k8s.io/kubernetes vX.N.P goes with its staging modules at v0.N.P: a half-done bump is an error.
  bad=$(awk -v want="$staging" '$1 == "replace" { $1 = ""; $0 = $0 }
                                $2 == "=>" && $1 ~ /^k8s\.io\// && ($3 != $1 || $4 != want) { print "  " $0 }' "$src/go.mod")
  [ -z "$bad" ] || die "$src/go.mod requires k8s.io/kubernetes $version, so every k8s.io staging module must be replaced by itself at $staging; these are not:"$'\n'"$bad"
  use_machine_go "$(go_min_minor "$src")" "$rel"

  # Measured cold on 2 cores at ab2d7f9, alone (kube-apiserver is most of it); kubeadm-v1beta3 in the install
  # of dd6df46, under load.
  local takes="about 4 minutes on 2 cores"
  [ "$*" = kubeadm-v1beta3 ] && takes="about 3 minutes on 2 cores"
  [ "$*" = sim-kubelet ] && takes="a small part of the module"
  [ "$src" = "$K8S_NODE_SRC" ] && takes="about 4 minutes on 2 cores after hack/tools/k8s"
  prepare_current "$src" "$dir" "kubernetes $* $version" "the fallback $KUBE_VERSION in $KUBE_DIR/bin stays" "$takes" \
    || return 0

  # What `make` stamps into a release (hack/lib/version.sh); kubeadm refuses to run with the unset default.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  # A main of the module's own (./cmd/<bin>), else kubernetes' own (a release module's `tool` lines).
  for bin in "$@"; do
    pkg=./cmd/$bin
    [ -d "$src/cmd/$bin" ] || pkg=k8s.io/kubernetes/cmd/$bin
    go_build "$src" "$dir.tmp" "$bin" "$ldflags" "$pkg"
  done

  for bin in "$@"; do
    case "$bin" in
      kube-apiserver | kubelet | kube-controller-manager | kube-scheduler | kube-proxy)
        out=$("$dir.tmp/bin/$bin" --version 2>&1) || true; want="Kubernetes $version" ;;
      pause) out=$("$dir.tmp/bin/$bin" -v 2>&1) || true; want=pause ;;
      kubeadm*) out=$("$dir.tmp/bin/$bin" version -o short 2>&1) || true; want="$version" ;;
      sim-kubelet) out=$("$dir.tmp/bin/$bin" --version 2>&1) || true; want="$version" ;;
      *) die "build_k8s_module: no version check for $bin" ;;
    esac
    [ "$out" = "$want" ] || { rm -rf "$dir.tmp"; die "the built $bin says '$out', not '$want'"; }
  done
  finish_current "$dir"
  say "$* $version cached in $dir/bin"
}

# kube-apiserver and kubeadm of the current release (hack/tools/k8s), and sim-kubelet, the kubelet's
# port-forward endpoint for simulated nodes (hack/tools/k8s/cmd/sim-kubelet).
# kube-apiserver, kubeadm and sim-kubelet of hack/tools/k8s, or those of them named after $1 (the quickstart
# builds sim-kubelet alone).
build_current_k8s() { build_k8s_module "$1" "$CURRENT_K8S_SRC" "${@:2}"; }

# The node components of real nodes (hack/tools/k8s-node), of the k8s.io/kubernetes version hack/tools/k8s pins.
build_current_k8s_node() {
  local want have
  want=$(required_version "$CURRENT_K8S_SRC" k8s.io/kubernetes)
  have=$(required_version "$K8S_NODE_SRC" k8s.io/kubernetes)
  [ "$have" = "$want" ] \
    || die "hack/tools/k8s-node requires k8s.io/kubernetes $have, hack/tools/k8s $want: a node runs the kubelet of the release its kubeadm and API server are; bump them together"
  build_k8s_module "$1" "$K8S_NODE_SRC" "${@:2}"
}

# CoreDNS (hack/tools/coredns) at the version kubeadm of the release in hack/tools/k8s-node deploys.
build_current_coredns() { build_coredns_module "$1" "$COREDNS_SRC" "$K8S_NODE_SRC"; }

# CoreDNS of another release (hack/tools/coredns-1.N, folder $2): the version kubeadm of hack/tools/k8s-1.N
# deploys, into $1.
build_release_coredns() { build_coredns_module "$1" "$2" "$TOOLS_SRC/k8s-${2##*/coredns-}"; }

# CoreDNS of the github.com/coredns/coredns version required in the Go module $2 (its ./cmd/coredns, else
# CoreDNS's own main through a `tool` line), which kubeadm of the k8s.io/kubernetes module $3 must deploy,
# into $1.
build_coredns_module() {
  local dir="$1" src="$2" kubeadm_src="$3" version out kubeadm_wants pkg=./cmd/coredns
  version=$(required_version "$src" github.com/coredns/coredns)
  [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "$src/go.mod: no github.com/coredns/coredns v1.N.P requirement (found '$version')"
  [ -f "$kubeadm_src/go.mod" ] || die "${src#"$REPO_ROOT"/}: no ${kubeadm_src#"$REPO_ROOT"/} whose kubeadm deploys it"
  use_machine_go "$(go_min_minor "$src")" "${src#"$REPO_ROOT"/}"
  # kubeadm's constants.CoreDNSVersion of that release, read from the module it is built from.
  kubeadm_wants=$(module_go "$kubeadm_src" list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null \
    | xargs -I{} sed -nE 's/^\s*CoreDNSVersion = "(v[0-9.]+)"$/\1/p' {}/cmd/kubeadm/app/constants/constants.go) || true
  [ -z "$kubeadm_wants" ] || [ "$kubeadm_wants" = "$version" ] \
    || die "${src#"$REPO_ROOT"/} pins CoreDNS $version, but kubeadm of ${kubeadm_src#"$REPO_ROOT"/} deploys $kubeadm_wants: pin that one"
  prepare_current "$src" "$dir" "CoreDNS $version" \
    "the real-node tests fail, naming the missing binary" "about 3 minutes on 2 cores" || return 0
  [ -d "$src/cmd/coredns" ] || pkg=github.com/coredns/coredns
  go_build "$src" "$dir.tmp" coredns "-s -w" "$pkg"
  out=$("$dir.tmp/bin/coredns" -version 2>&1 | head -1) || true
  [ "$out" = "CoreDNS-${version#v}" ] || { rm -rf "$dir.tmp"; die "the built coredns -version says '$out', not 'CoreDNS-${version#v}'"; }
  finish_current "$dir"
  say "CoreDNS $version cached in $dir/bin"
}

# kubeadm 1.30 for the configurations in kubeadm API v1beta3 (hack/tools/k8s-v1beta3).
build_current_kubeadm_v1beta3() { build_k8s_module "$1" "$KUBEADM_V1BETA3_SRC" kubeadm-v1beta3; }

# etcd, etcdctl and etcdutl of the go.etcd.io/etcd/server/v3 version required in hack/tools/etcd/go.mod.
build_current_etcd() { build_etcd_module "$1" "$CURRENT_ETCD_SRC"; }

# kube-apiserver and kubeadm of another release (hack/tools/k8s-1.N, folder $2) into $1.
build_release_k8s() { build_k8s_module "$1" "$2" "${@:3}"; }

# The node components of another release (hack/tools/k8s-node-1.N, folder $2), of the k8s.io/kubernetes
# version hack/tools/k8s-1.N pins, into $1.
build_release_k8s_node() {
  local src="$2" release want have
  release="$TOOLS_SRC/k8s-${src##*/k8s-node-}"
  [ -f "$release/go.mod" ] || die "${src#"$REPO_ROOT"/} has no ${release#"$REPO_ROOT"/} beside it: a node runs the kube-apiserver and kubeadm of its kubelet's release"
  want=$(required_version "$release" k8s.io/kubernetes)
  have=$(required_version "$src" k8s.io/kubernetes)
  [ "$have" = "$want" ] \
    || die "${src#"$REPO_ROOT"/} requires k8s.io/kubernetes $have, ${release#"$REPO_ROOT"/} $want: a node runs the kubelet of the release its kubeadm and API server are; bump them together"
  build_k8s_module "$1" "$src" "${@:3}"
}

# etcd, etcdctl and etcdutl of another release (hack/tools/etcd-3.N, folder $2) into $1.
build_release_etcd() { build_etcd_module "$1" "$2"; }

# etcd, etcdctl and etcdutl of the go.etcd.io/etcd/server/v3 version required in $2/go.mod, into $1.
build_etcd_module() {
  local dir="$1" src="$2" version m bin out
  version=$(required_version "$src" go.etcd.io/etcd/server/v3)
  [[ "$version" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "$src/go.mod: no go.etcd.io/etcd/server/v3 v3.N.P requirement (found '$version')"
  for m in go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3; do
    [ "$(required_version "$src" "$m")" = "$version" ] || die "$src/go.mod: $m must be required at $version like go.etcd.io/etcd/server/v3"
  done
  use_machine_go "$(go_min_minor "$src")" "${src#"$REPO_ROOT"/}"

  prepare_current "$src" "$dir" "etcd, etcdctl and etcdutl $version" "Debian's etcd on PATH stays" \
    "about 1 minute on 2 cores" || return 0

  # etcd's version is a constant of go.etcd.io/etcd/api/v3/version; only the git commit is left unset.
  for bin in etcd etcdctl etcdutl; do go_build "$src" "$dir.tmp" "$bin" "-s -w"; done

  out=$("$dir.tmp/bin/etcd" --version 2>&1) || true
  grep -qx "etcd Version: ${version#v}" <<<"$out" || { rm -rf "$dir.tmp"; die "the built etcd --version does not say 'etcd Version: ${version#v}': $out"; }
  out=$("$dir.tmp/bin/etcdctl" version 2>&1) || true
  grep -qx "etcdctl version: ${version#v}" <<<"$out" || { rm -rf "$dir.tmp"; die "the built etcdctl version does not say 'etcdctl version: ${version#v}': $out"; }
  out=$("$dir.tmp/bin/etcdutl" version 2>&1) || true
  grep -qx "etcdutl version: ${version#v}" <<<"$out" || { rm -rf "$dir.tmp"; die "the built etcdutl version does not say 'etcdutl version: ${version#v}': $out"; }
  finish_current "$dir"
  say "etcd, etcdctl and etcdutl $version cached in $dir/bin"
}

# The manifests of the sigs.k8s.io/cluster-api version required in hack/tools/capi/go.mod, copied from the
# module into $1/config: for each manager its CRDs (crd/), the kustomization of the CRDs
# (crd-kustomization.yaml: the labels the release adds), webhook/manifests.yaml and its whole config/
# folder as <part>/kustomize/ (what its release's components file is built from with `kustomize build
# <part>/kustomize/default`); and the module's metadata.yaml (its releaseSeries).
copy_capi_config() {
  local dir="$1" module_dir part from
  module_dir=$(module_go "$CAPI_SRC" list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api) \
    || die "go list -m sigs.k8s.io/cluster-api in $CAPI_SRC failed"
  rm -rf "$dir/config.tmp"
  for part in core:core bootstrap:bootstrap/kubeadm controlplane:controlplane/kubeadm; do
    from="$module_dir/${part#*:}/config"
    [ -d "$from/crd/bases" ] && [ -f "$from/webhook/manifests.yaml" ] \
      || die "sigs.k8s.io/cluster-api in $module_dir has no ${part#*:}/config/crd/bases or webhook/manifests.yaml"
    mkdir -p "$dir/config.tmp/${part%%:*}/webhook"
    cp -r "$from/crd/bases" "$dir/config.tmp/${part%%:*}/crd"
    # Its labels (the contract labels of the kubeadm providers' CRDs) are part of the release's CRDs.
    cp "$from/crd/kustomization.yaml" "$dir/config.tmp/${part%%:*}/crd-kustomization.yaml"
    cp "$from/webhook/manifests.yaml" "$dir/config.tmp/${part%%:*}/webhook/"
    # The whole kustomization, which `kustomize build` makes the provider's release components of
    # (testenv::capi::ClusterApi::components).
    [ -f "$from/default/kustomization.yaml" ] \
      || die "sigs.k8s.io/cluster-api in $module_dir has no ${part#*:}/config/default/kustomization.yaml"
    cp -r "$from" "$dir/config.tmp/${part%%:*}/kustomize"
  done
  [ -f "$module_dir/metadata.yaml" ] || die "sigs.k8s.io/cluster-api in $module_dir has no metadata.yaml"
  cp "$module_dir/metadata.yaml" "$dir/config.tmp/metadata.yaml"
  chmod -R u+w "$dir/config.tmp"
  rm -rf "$dir/config"
  mv "$dir/config.tmp" "$dir/config"
}

# Cluster API of the sigs.k8s.io/cluster-api version required in hack/tools/capi/go.mod: the binaries $2...
# of its core manager, clusterctl and the kubeadm bootstrap and control-plane managers into $1/bin (those
# not built there yet), its manifests into $1/config (copy_capi_config).
build_current_capi() {
  local dir="$1" src="$CAPI_SRC" version ldflags pkg out bin takes
  shift
  version=$(required_version "$src" sigs.k8s.io/cluster-api)
  [[ "$version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "$src/go.mod: no sigs.k8s.io/cluster-api v1.N.P requirement (found '$version')"
  local minor="${BASH_REMATCH[1]}"
  grep -qE "^replace sigs\.k8s\.io/cluster-api/api => sigs\.k8s\.io/cluster-api/api $version\$" "$src/go.mod" \
    || die "$src/go.mod requires sigs.k8s.io/cluster-api $version, so it must replace sigs.k8s.io/cluster-api/api by itself at $version"
  use_machine_go "$(go_min_minor "$src")" hack/tools/capi

  # Measured cold on 2 cores at ab2d7f9, alone: the core manager and clusterctl; the two kubeadm managers
  # add half a minute.
  takes="about 3 minutes on 2 cores"
  [ "$*" = "cluster-api-manager clusterctl" ] && takes="about 2.5 minutes on 2 cores"
  prepare_current "$src" "$dir" "Cluster API $* $version" \
    "the tests that drive Cluster API's own managers fail, naming the missing binary" "$takes" || return 0

  # What Cluster API's release build stamps (sigs.k8s.io/cluster-api/version); clusterctl compares its
  # own version with the providers' contracts.
  ldflags="-s -w"
  for pkg in "gitMajor=1" "gitMinor=$minor" "gitVersion=$version" "gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"; do
    ldflags+=" -X sigs.k8s.io/cluster-api/version.$pkg"
  done
  for bin in "$@"; do
    [ -x "$dir.tmp/bin/$bin" ] && continue
    case "$bin" in
      cluster-api-manager) pkg=sigs.k8s.io/cluster-api/core ;;
      clusterctl) pkg=sigs.k8s.io/cluster-api/cmd/clusterctl ;;
      capi-kubeadm-bootstrap-manager) pkg=sigs.k8s.io/cluster-api/bootstrap/kubeadm ;;
      capi-kubeadm-control-plane-manager) pkg=sigs.k8s.io/cluster-api/controlplane/kubeadm ;;
      *) die "build_current_capi: no package for $bin" ;;
    esac
    go_build "$src" "$dir.tmp" "$bin" "$ldflags" "$pkg"
  done

  if [ -x "$dir.tmp/bin/clusterctl" ]; then
    out=$("$dir.tmp/bin/clusterctl" version -o short 2>&1) || true
    [ "$out" = "$version" ] || { rm -rf "$dir.tmp"; die "the built clusterctl says '$out', not '$version'"; }
  fi

  copy_capi_config "$dir.tmp"
  finish_current "$dir"
  say "Cluster API $version cached in $dir (bin/, config/)"
}

# kustomize of the sigs.k8s.io/kustomize/kustomize/v5 version required in hack/tools/kustomize/go.mod.
build_current_kustomize() {
  local dir="$1" src="$KUSTOMIZE_SRC" version out
  version=$(required_version "$src" sigs.k8s.io/kustomize/kustomize/v5)
  use_machine_go "$(go_min_minor "$src")" hack/tools/kustomize
  prepare_current "$src" "$dir" "kustomize $version" \
    "the tests that install Cluster API's core with clusterctl fail, naming the missing binary" \
    "about 2 minutes on 2 cores" || return 0
  go_build "$src" "$dir.tmp" kustomize "-s -w" sigs.k8s.io/kustomize/kustomize/v5
  out=$("$dir.tmp/bin/kustomize" version 2>&1) || true
  [ "$out" = "$version" ] || { rm -rf "$dir.tmp"; die "the built kustomize version says '$out', not '$version'"; }
  finish_current "$dir"
  say "kustomize $version cached in $dir/bin"
}

# clusterctl-envsubst (hack/tools/envsubst): clusterctl's simple template processor of the Cluster API version
# its go.mod pins, answering for the templates the tests give it.
build_current_envsubst() {
  local dir="$1" src="$ENVSUBST_SRC" version out
  version=$(required_version "$src" sigs.k8s.io/cluster-api)
  use_machine_go "$(go_min_minor "$src")" hack/tools/envsubst
  prepare_current "$src" "$dir" "clusterctl-envsubst $version" \
    "the test comparing generate cluster with clusterctl fails, naming the missing binary" \
    "well under a minute" || return 0
  go_build "$src" "$dir.tmp" clusterctl-envsubst "-s -w"
  out=$("$dir.tmp/bin/clusterctl-envsubst" --version 2>&1) || true
  [ "$out" = "$version" ] || { rm -rf "$dir.tmp"; die "the built clusterctl-envsubst says it links Cluster API '$out', not '$version'"; }
  finish_current "$dir"
  say "clusterctl-envsubst $version cached in $dir/bin"
}

# versitygw of the github.com/versity/versitygw version required in hack/tools/versitygw/go.mod, its
# version stamped as its release Makefile does.
build_current_versitygw() {
  local dir="$1" src="$VERSITYGW_SRC" version out
  version=$(required_version "$src" github.com/versity/versitygw)
  use_machine_go "$(go_min_minor "$src")" hack/tools/versitygw
  prepare_current "$src" "$dir" "versitygw $version" \
    "the etcd snapshot tests against object storage fail, naming the missing binary" \
    "about 2 minutes on 2 cores" || return 0
  go_build "$src" "$dir.tmp" versitygw "-s -w -X main.Version=$version" github.com/versity/versitygw/cmd/versitygw
  out=$("$dir.tmp/bin/versitygw" --version 2>&1) || true
  grep -qx "Version  : $version" <<<"$out" || { rm -rf "$dir.tmp"; die "the built versitygw --version does not say '$version': $out"; }
  finish_current "$dir"
  say "versitygw $version cached in $dir/bin"
}

free_gib() { df -BG --output=avail "$CACHE_ROOT" | tail -1 | tr -d ' G'; }

# Frees disk for what comes after (the Rust build): everything in the cache root but the builds this run
# uses, which is Go's build cache too, and Go's module cache. A later change of hack/tools then builds
# from nothing again, as on a new machine.
prune_cache() {
  local keep=("$KUBE_DIR" "$TOOLS_DIR" "${CURRENT_DIRS[@]}") entry k used before
  before=$(free_gib)
  for entry in "$CACHE_ROOT"/*; do
    [ -e "$entry" ] || continue
    used=0
    for k in "${keep[@]}"; do [ "$entry" = "$k" ] && used=1; done
    if [ "$used" = 0 ]; then
      say "pruning $entry ($(du -sh "$entry" 2>/dev/null | cut -f1))"
      rm -rf "$entry"
    fi
  done
  # The builds ran in jobs whose PATH this shell does not have: the machine's Go may only be in /usr/local/go.
  if PATH="$PATH:/usr/local/go/bin" command -v go >/dev/null; then
    say "pruning Go's module cache $(PATH="$PATH:/usr/local/go/bin" GOFLAGS='' go env GOMODCACHE)"
    PATH="$PATH:/usr/local/go/bin" GOFLAGS='' GOTOOLCHAIN=local go clean -modcache || say "could not prune Go's module cache"
  fi
  say "disk free: ${before} GiB before pruning, $(free_gib) GiB after"
}

# --- Jobs: the builds are queued (queue_job), then run in the background, at most MAX_JOBS at once
# (run_jobs). Each job is a process group of its own, so that an interrupt stops the Go builds under it too (a
# background job of a script ignores Ctrl-C, and would go on building after the script ended); its lines
# are prefixed with its name. A failed job does not stop the others: what they build is cached for the
# next run. run_jobs names the failed ones.
declare -A JOB_NAMES=()
FAILED_JOBS=()
if [ -n "${TESTENV_JOBS:-}" ]; then
  [[ "$TESTENV_JOBS" =~ ^[1-9][0-9]*$ ]] || die "TESTENV_JOBS=$TESTENV_JOBS: expected a number >= 1"
  MAX_JOBS=$TESTENV_JOBS
else
  # A Go build of kubernetes peaks at about 1.3 GB, a Rust build (cargo-nextest) about as much, and each
  # keeps 2 cores busy: on 2 cores, jobs side by side only contend (see the top of this file).
  MAX_JOBS=$(awk '/MemAvailable/ {printf "%d", $2 / 1048576 / 2}' /proc/meminfo)
  (( MAX_JOBS <= $(nproc) / 2 )) || MAX_JOBS=$(( $(nproc) / 2 ))
  (( MAX_JOBS <= 4 )) || MAX_JOBS=4
  (( MAX_JOBS >= 1 )) || MAX_JOBS=1
fi

QUEUED_NAMES=()
QUEUED_COMMANDS=()
# Usage: queue_job NAME COMMAND...
queue_job() {
  QUEUED_NAMES+=("$1")
  shift
  # Its words joined by the unit separator, which no path or argument here holds.
  QUEUED_COMMANDS+=("$(IFS=$'\x1f'; printf '%s' "$*")")
}

# Usage: start_job NAME COMMAND...; waits first while MAX_JOBS jobs run.
start_job() {
  local name="$1"
  shift
  while (( ${#JOB_NAMES[@]} >= MAX_JOBS )); do reap_job; done
  set -m
  ( ( "$@" ) 2>&1 | sed -u "s/^/[$name] /" ) &
  JOB_NAMES[$!]="$name"
  set +m
}

reap_job() {
  local pid status=0
  wait -n -p pid "${!JOB_NAMES[@]}" || status=$?
  [ "$status" = 0 ] || FAILED_JOBS+=("${JOB_NAMES[$pid]}")
  unset "JOB_NAMES[$pid]"
}

# Runs the queued jobs in their order and waits for all of them.
run_jobs() {
  local i words
  for i in "${!QUEUED_NAMES[@]}"; do
    IFS=$'\x1f' read -r -a words <<<"${QUEUED_COMMANDS[$i]}"
    start_job "${QUEUED_NAMES[$i]}" "${words[@]}"
  done
  while (( ${#JOB_NAMES[@]} > 0 )); do reap_job; done
  [ "${#FAILED_JOBS[@]}" = 0 ] \
    || die "failed: ${FAILED_JOBS[*]} (their lines above start with [name]; what the jobs that succeeded built is cached)"
}

stop_jobs() {
  local pid
  for pid in "${!JOB_NAMES[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
}

# Builds, unless cached, the binaries $3... of the module in $1 into tools-$2-<hash>/bin with
# build_current_$2, as a job named after the module's folder.
ensure_current() {
  local src="$1" name="$2" dir bin missing=()
  shift 2
  dir=$(current_dir "$src" "$name")
  CURRENT_DIRS+=("$dir")
  for bin in "$@"; do [ -x "$dir/bin/$bin" ] || missing+=("$bin"); done
  if [ "${#missing[@]}" = 0 ]; then
    # testenv::binaries picks a build by the version it says; among builds of one version, the newest.
    for bin in "$@"; do touch "$dir/bin/$bin"; done
    say "$* found in $dir/bin (cached)"
  else
    queue_job "${src#"$TOOLS_SRC"/}" "build_current_$name" "$dir" "$@"
  fi
}

# Builds, unless cached, the binaries $3... of the release module in $1 (hack/tools/k8s-1.N, k8s-node-1.N,
# coredns-1.N or etcd-3.N) with
# the function $2 (given the build folder, the module and the binaries), as a job named after the module.
ensure_release() {
  local src="$1" build="$2" dir bin missing=()
  shift 2
  dir=$(current_dir "$src" "$(basename "$src")")
  CURRENT_DIRS+=("$dir")
  for bin in "$@"; do [ -x "$dir/bin/$bin" ] || missing+=("$bin"); done
  if [ "${#missing[@]}" = 0 ]; then
    for bin in "$@"; do touch "$dir/bin/$bin"; done
    say "$* of ${src#"$TOOLS_SRC"/} found in $dir/bin (cached)"
  else
    queue_job "${src#"$TOOLS_SRC"/}" "$build" "$dir" "$src" "$@"
  fi
}

# rustfmt and clippy: `make test` runs `make lint` first, and a minimal rustup profile has neither.
ensure_rust_components() {
  local missing=()
  command -v cargo >/dev/null || die "cargo not found: install Rust first (https://rustup.rs)"
  cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
  cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
  [ "${#missing[@]}" = 0 ] && return
  command -v rustup >/dev/null \
    || die "cargo has no ${missing[*]} and there is no rustup to add them; install them with this Rust toolchain"
  say "adding rustup components: ${missing[*]}"
  rustup component add "${missing[@]}"
}

# cargo-nextest, which `make test` runs the tests with. A Rust build of its own (about 10 minutes on
# 2 cores), hence a job next to the Go builds.
install_cargo_nextest() {
  local log
  log=$(mktemp)
  say "installing cargo-nextest with cargo install --locked (about 10 minutes on 2 cores)"
  if ! cargo install cargo-nextest --locked >"$log" 2>&1; then
    tail -30 "$log" >&2
    rm -f "$log"
    die "cargo install cargo-nextest --locked failed (log above)"
  fi
  rm -f "$log"
  cargo nextest --version >/dev/null 2>&1 \
    || die "cargo-nextest installed, but cargo does not find it: put $(dirname "$(command -v cargo)") or ~/.cargo/bin on PATH"
  say "cargo-nextest installed: $(cargo nextest --version 2>/dev/null | head -1)"
}

ensure_packages
if ! command -v kubectl >/dev/null; then
  [ "${SKIP_APT:-0}" = 1 ] && die "kubectl not found (SKIP_APT=1 is set; install Debian's kubernetes-client)"
  say "kubectl not found: installing Debian's kubernetes-client"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kubernetes-client
fi
tools=(protoc make ip kubectl)
[ "$MODE" = all ] && tools+=(etcd etcdctl cloud-init systemd-nspawn openssl curl)
[ "$NODES" = 1 ] && tools+=(containerd ctr runc nft iptables)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || die "$tool not on PATH after installing packages"
done
[ "$MODE" = all ] && ensure_rust_components
if [ "$PACKAGES_ONLY" = 1 ]; then
  say "done (--packages-only, $MODE): ${tools[*]} on PATH"
  exit 0
fi

# Nothing built yet (a new machine): the whole build's duration is worth saying.
FRESH=1
for entry in "$CACHE_ROOT"/tools-* "$CACHE_ROOT"/kubernetes-*; do [ -e "$entry" ] && FRESH=0; done
trap 'exit 130' INT
trap 'exit 143' TERM
trap stop_jobs EXIT
CURRENT_DIRS=()
TOOLS_DIR=$(tools_dir)
if [ "${SKIP_CURRENT:-0}" = 1 ]; then
  [ "$MODE" = quickstart ] && die "SKIP_CURRENT=1: the quickstart runs only the current releases; build them, or run make dev"
  say "SKIP_CURRENT=1: not building kubernetes, etcd and Cluster API from hack/tools/k8s, k8s-v1beta3, etcd and capi"
else
  # The longest builds first, so that the last job to end started early.
  if [ "$MODE" = quickstart ]; then
    # clusterctl says which release the core manager beside it is (testenv::binaries::cluster_api_manager).
    capi_bins=(cluster-api-manager clusterctl)
  else
    capi_bins=(cluster-api-manager clusterctl capi-kubeadm-bootstrap-manager capi-kubeadm-control-plane-manager)
  fi
  # A build cached before config/metadata.yaml or the kubeadm providers' kustomizations were copied gets
  # its manifests without a rebuild.
  capi_dir=$(current_dir "$CAPI_SRC" capi)
  if [ -x "$capi_dir/bin/cluster-api-manager" ] \
    && { [ ! -f "$capi_dir/config/metadata.yaml" ] || [ ! -d "$capi_dir/config/controlplane/kustomize/default" ]; }; then
    say "copying Cluster API's manifests into $capi_dir/config"
    ( use_machine_go "$(go_min_minor "$CAPI_SRC")" hack/tools/capi && copy_capi_config "$capi_dir" )
  fi
  ensure_current "$CAPI_SRC" capi "${capi_bins[@]}"
  if [ "$MODE" = quickstart ] && [ "$NODES" = 0 ]; then
    # The quickstart's management plane and simulated machines run the newest release (below); of this
    # one only the simulated kubelet's port-forward endpoint.
    ensure_current "$CURRENT_K8S_SRC" k8s sim-kubelet
  else
    ensure_current "$CURRENT_K8S_SRC" k8s kube-apiserver kubeadm sim-kubelet
  fi
fi
if [ "$MODE" = all ]; then
  if [ -x "$KUBE_DIR/bin/kube-apiserver" ] && [ -x "$KUBE_DIR/bin/kubeadm" ]; then
    say "kube-apiserver and kubeadm $KUBE_VERSION found in $KUBE_DIR/bin (cached)"
  else
    # A job (a subshell): the build puts Debian's Go 1.19 first on PATH, sets GOPATH/GO111MODULE and changes
    # directory.
    queue_job kubernetes-1.20 build_kubernetes
  fi
fi
if [ "${SKIP_CURRENT:-0}" != 1 ]; then
  [ "$MODE" = all ] && ensure_current "$KUBEADM_V1BETA3_SRC" kubeadm_v1beta3 kubeadm-v1beta3
  [ "$MODE" = all ] || [ "$NODES" = 1 ] && ensure_current "$CURRENT_ETCD_SRC" etcd etcd etcdctl etcdutl
  [ "$MODE" = all ] && ensure_current "$KUSTOMIZE_SRC" kustomize kustomize
  [ "$MODE" = all ] && ensure_current "$ENVSUBST_SRC" envsubst clusterctl-envsubst
  [ "$MODE" = all ] && ensure_current "$VERSITYGW_SRC" versitygw versitygw
  if [ "$MODE" = all ]; then
    for src in "${RELEASE_ETCD_SRCS[@]}"; do ensure_release "$src" build_release_etcd etcd etcdctl etcdutl; done
    for src in "${RELEASE_K8S_SRCS[@]}"; do ensure_release "$src" build_release_k8s kube-apiserver kubeadm; done
  else
    # The newest release, which the management plane runs by default (testenv::binaries::management).
    ensure_release "${RELEASE_ETCD_SRCS[-1]}" build_release_etcd etcd etcdctl etcdutl
    ensure_release "${RELEASE_K8S_SRCS[-1]}" build_release_k8s kube-apiserver kubeadm
  fi
  if [ "$NODES" = 1 ]; then
    ensure_current "$K8S_NODE_SRC" k8s_node kubelet kube-controller-manager kube-scheduler kube-proxy pause
    ensure_current "$COREDNS_SRC" coredns coredns
  fi
  if [ "$NODE_RELEASES" = 1 ]; then
    for src in "${RELEASE_K8S_NODE_SRCS[@]}"; do
      ensure_release "$src" build_release_k8s_node kubelet kube-controller-manager kube-scheduler kube-proxy
    done
    for src in "${RELEASE_COREDNS_SRCS[@]}"; do ensure_release "$src" build_release_coredns coredns; done
  fi
fi
if [ "$MODE" = all ]; then
  if [ -x "$TOOLS_DIR/bin/ignition-check" ] && [ -x "$TOOLS_DIR/bin/go-template" ]; then
    # Touched so that they are the newest tools-* folder's binaries, the ones testenv::binaries picks.
    touch "$TOOLS_DIR/bin/ignition-check" "$TOOLS_DIR/bin/go-template"
    say "ignition-check and go-template found in $TOOLS_DIR/bin (cached)"
  else
    queue_job ignition-check build_ignition_check "$TOOLS_DIR"
  fi
  if command -v cargo-nextest >/dev/null || cargo nextest --version >/dev/null 2>&1; then
    say "cargo-nextest found: $(cargo nextest --version 2>/dev/null | head -1)"
  else
    queue_job cargo-nextest install_cargo_nextest
  fi
fi
if [ "${#QUEUED_NAMES[@]}" -gt 0 ]; then
  takes=""
  # From an empty cache and Go module cache, measured on 2 cores: the quickstart's at ab2d7f9 (394 s one job
  # at a time; 739 s with 3 jobs next to the cargo build); everything from the install of dd6df46 (2,061 s,
  # one at a time, under load).
  if [ "$FRESH" = 1 ] && [ "$MODE" = quickstart ]; then takes="; from nothing about 7 minutes on 2 cores, longer next to the Rust build of make quickstart"; fi
  if [ "$FRESH" = 1 ] && [ "$MODE" = all ]; then takes="; from nothing about 35 minutes on 2 cores"; fi
  # The node components: about 6.5 minutes more (958f83f).
  if [ "$FRESH" = 1 ] && [ "$NODES" = 1 ]; then takes="$takes, about 7 minutes more for the real nodes' components"; fi
  if [ "$FRESH" = 1 ] && [ "$NODE_RELEASES" = 1 ]; then takes="$takes, about 4 minutes more for each other release's"; fi
  say "building ${QUEUED_NAMES[*]}, up to $MAX_JOBS at once (TESTENV_JOBS)$takes"
fi
run_jobs
if [ -n "${TESTENV_MIN_FREE_GIB:-}" ] && (( $(free_gib) < TESTENV_MIN_FREE_GIB )); then
  say "less than $TESTENV_MIN_FREE_GIB GiB of disk free"
  prune_cache
fi
if [ "$MODE" = all ]; then
  say "done: etcd $(etcd --version 2>/dev/null | awk '/etcd Version/{print $3}'), kube-apiserver in $KUBE_DIR/bin, ignition-check in $TOOLS_DIR/bin"
else
  say "done: what the quickstart runs"
fi
for dir in "${CURRENT_DIRS[@]}"; do
  [ -d "$dir/bin" ] && say "current releases: $(cd "$dir/bin" && ls | paste -sd' ' -) in $dir/bin"
done
exit 0
