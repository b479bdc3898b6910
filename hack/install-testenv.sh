#!/usr/bin/env bash
# Installs the real parts the tests run against:
#   - Debian packages: etcd 3.4 (server + etcdctl), Go (to build the apiserver), cloud-init (schema checks),
#     protoc (the etcd-client crate compiles etcd's protobufs);
#   - kube-apiserver and kubeadm v1.20.2, built from Debian bookworm's `kubernetes` source package, because no
#     registry reachable here ships the binaries. The build is cached outside the repository and reused;
#   - ignition-check (hack/tools/cmd/ignition-check), built with the machine's own Go (>= 1.22, the `go` first
#     on PATH) from modules of the Go module proxy, cached under a hash of its sources so a change rebuilds.
#
# Idempotent: a second run checks, prints what it found and exits in well under a second.
# Environment:
#   KUBEADM_PROVIDERS_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kubeadm-providers)
#   SKIP_APT=1                never call apt-get (fail instead when a package is missing)
set -euo pipefail

CACHE_ROOT="${KUBEADM_PROVIDERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeadm-providers}"
KUBE_VERSION="v1.20.2"
# Bump when the build recipe changes, so machines with an older cached build rebuild.
RECIPE="r3"
KUBE_DIR="$CACHE_ROOT/kubernetes-$KUBE_VERSION-$RECIPE"
APT_PACKAGES=(etcd-server etcd-client golang-go golang-github-modern-go-reflect2-dev cloud-init
  protobuf-compiler dpkg-dev openssl ca-certificates)
REFLECT2_FIX=/usr/share/gocode/src/github.com/modern-go/reflect2

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_SRC="$REPO_ROOT/hack/tools"
# The oldest Go that builds hack/tools (its go.mod says `go 1.22`).
TOOLS_GO_MIN_MINOR=22

started=$(date +%s)
say() { printf '[install-testenv %3ss] %s\n' "$(($(date +%s) - started))" "$*"; }
die() { printf '[install-testenv] error: %s\n' "$*" >&2; exit 1; }

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

build_ignition_check() {
  local dir="$1" go_bin go_version minor
  # A machine whose own Go is not first on PATH (e.g. Debian's 1.19 installed above for the 1.20 build):
  # use the machine's Go from its usual place.
  minor=$(go env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p') || true
  if { [ -z "$minor" ] || [ "$minor" -lt "$TOOLS_GO_MIN_MINOR" ]; } && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  go_bin=$(command -v go) || die "go not found on PATH: hack/tools needs Go >= 1.$TOOLS_GO_MIN_MINOR (put the machine's Go, e.g. /usr/local/go/bin, first on PATH)"
  go_version=$(go env GOVERSION 2>/dev/null) || die "$go_bin env GOVERSION failed"
  minor=$(printf '%s' "$go_version" | sed -nE 's/^go1\.([0-9]+).*/\1/p')
  [ -n "$minor" ] && [ "$minor" -ge "$TOOLS_GO_MIN_MINOR" ] \
    || die "hack/tools needs Go >= 1.$TOOLS_GO_MIN_MINOR, but the go first on PATH ($go_bin) is $go_version; put a newer Go first on PATH"
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
  rm -f "$log"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  say "ignition-check built in $(($(date +%s) - t0))s, cached in $dir/bin"
}

ensure_packages
if ! command -v kubectl >/dev/null; then
  [ "${SKIP_APT:-0}" = 1 ] && die "kubectl not found (SKIP_APT=1 is set; install Debian's kubernetes-client)"
  say "kubectl not found: installing Debian's kubernetes-client"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kubernetes-client
fi
for tool in etcd etcdctl protoc cloud-init kubectl; do
  command -v "$tool" >/dev/null || die "$tool not on PATH after installing packages"
done
if [ -x "$KUBE_DIR/bin/kube-apiserver" ] && [ -x "$KUBE_DIR/bin/kubeadm" ]; then
  say "kube-apiserver and kubeadm $KUBE_VERSION found in $KUBE_DIR/bin (cached)"
else
  # In a subshell: the build puts Debian's Go 1.19 first on PATH, sets GOPATH/GO111MODULE and changes directory.
  ( build_kubernetes )
fi
TOOLS_DIR=$(tools_dir)
if [ -x "$TOOLS_DIR/bin/ignition-check" ]; then
  # Touched so that it is the newest tools-* folder's binary, the one testenv::binaries::ignition_check() picks.
  touch "$TOOLS_DIR/bin/ignition-check"
  say "ignition-check found in $TOOLS_DIR/bin (cached)"
else
  build_ignition_check "$TOOLS_DIR"
fi
say "done: etcd $(etcd --version 2>/dev/null | awk '/etcd Version/{print $3}'), kube-apiserver in $KUBE_DIR/bin, ignition-check in $TOOLS_DIR/bin"
