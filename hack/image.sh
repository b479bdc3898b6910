#!/usr/bin/env bash
# Builds the image with both managers, tagged as the release manifests name it, on a machine that reaches
# no container registry (`make image`):
#   1. the managers, by cargo on this machine (release profile);
#   2. the build context target/image: the two binaries under bin/, and under rootfs/ a root made of the
#      Debian packages of this machine that hold the shared libraries they link against (glibc and libgcc:
#      the same build they were linked with, so the loader always matches), this machine's CA bundle
#      (ca-certificates generates it when installed; the package holds no bundle), /etc/passwd and
#      /etc/group with the non-root user 65532 the Deployments run as, /etc/nsswitch.conf and /tmp;
#   3. the Dockerfile over that context, FROM scratch, by buildah, podman or docker (CONTAINER_ENGINE, or
#      the first of them installed; buildah from Debian when none is); each binary's `--version` run in
#      the image; then its size and user.
# With OCI_ARCHIVE=path the image is also written there as an OCI archive, as a node's containerd imports
# it (`ctr -n k8s.io images import`).
#
# With RELEASE_VERSION=X.Y.Z the managers are built as that release (`--version`, User-Agent, first log
# line; `KUBEADM_PROVIDERS_VERSION` at compile time) in a target folder of their own, so a build under
# the next version (`clusterctl upgrade` on real nodes) and the usual one are both kept built.
#
# Usage: hack/image.sh IMAGE     e.g. docker.io/library/kubeadm-providers:v0.1.0
# Environment: CARGO (default cargo), CONTAINER_ENGINE, OCI_ARCHIVE, RELEASE_VERSION, SKIP_APT=1 (never
# call apt-get).
set -euo pipefail

image=${1:?usage: hack/image.sh IMAGE}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
version=${RELEASE_VERSION:-$crate_version}
version=${version#v}
target=${CARGO_TARGET_DIR:-$root/target}
if [ "$version" != "$crate_version" ]; then
  target=$target/as-v$version
  export KUBEADM_PROVIDERS_VERSION=$version
fi
context=$root/target/image
binaries=(bootstrap-manager controlplane-manager)
user_id=65532

say() { printf 'make image: %s\n' "$*" >&2; }

# buildah and podman need no daemon; docker only counts when its daemon answers.
engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  for candidate in buildah podman docker; do
    command -v "$candidate" >/dev/null || continue
    if [ "$candidate" = docker ] && ! docker info >/dev/null 2>&1; then
      say "docker is installed but its daemon does not answer: not used"
      continue
    fi
    engine=$candidate
    break
  done
fi
if [ -z "$engine" ]; then
  if [ "${SKIP_APT:-}" = 1 ]; then
    say "no container engine here (buildah, podman or docker) and SKIP_APT=1: install one, or set CONTAINER_ENGINE"
    exit 1
  fi
  say "no container engine here: installing Debian's buildah"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
  engine=buildah
fi
command -v "$engine" >/dev/null || { say "CONTAINER_ENGINE=$engine is not installed"; exit 1; }

started=$(date +%s)
say "building the managers as v$version (release profile: one optimized code unit; about 15 minutes cold on 2 cores)"
CARGO_TARGET_DIR=$target "$cargo" build --release --locked -p kubeadm-bootstrap -p kubeadm-controlplane \
  "${binaries[@]/#/--bin=}"
built=$(date +%s)

rm -rf "$context"
mkdir -p "$context/bin" "$context/rootfs"
for binary in "${binaries[@]}"; do
  install -m 0755 "$target/release/$binary" "$context/bin/$binary"
done

# The packages owning every shared library and the loader the binaries name.
libraries=$(for binary in "${binaries[@]}"; do
  ldd "$context/bin/$binary" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'
done | sort -u)
packages=()
for library in $libraries; do
  owner=$(dpkg -S "$library" 2>/dev/null || dpkg -S "$(readlink -f "$library")" 2>/dev/null) || {
    say "no Debian package holds $library, which the managers link against"
    exit 1
  }
  packages+=("${owner%%:*}")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)

# Each package's files as installed (its libraries, links and loader; not its documentation), at the
# paths the package names: folders are made as the files need them, so a merged /usr here (/lib a link
# to usr/lib) does not matter.
for package in "${packages[@]}"; do
  dpkg -L "$package" | while read -r path; do
    case $path in /usr/share/*) continue ;; esac
    [ -d "$path" ] && continue
    if [ -L "$path" ] || [ -f "$path" ]; then printf '%s\n' "${path#/}"; fi
  done
done | tar -C / -cf - --no-recursion -T - | tar -xf - -C "$context/rootfs"
mkdir -p "$context/rootfs/etc/ssl/certs" "$context/rootfs/tmp"
chmod 1777 "$context/rootfs/tmp"
cp -L /etc/ssl/certs/ca-certificates.crt "$context/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' \
  "$user_id" "$user_id" >"$context/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:%s:\n' "$user_id" >"$context/rootfs/etc/group"
printf 'hosts: files dns\n' >"$context/rootfs/etc/nsswitch.conf"

# Versions of what the root holds, for whoever inspects the image.
for package in "${packages[@]}"; do
  dpkg-query -W -f '${Package} ${Version}\n' "$package"
done >"$context/rootfs/etc/kubeadm-providers-packages"

case $engine in
  *buildah) "$engine" build --layers=false -f "$root/Dockerfile" -t "$image" "$context" ;;
  *) "$engine" build -f "$root/Dockerfile" -t "$image" "$context" ;;
esac
# The image runs: its loader, libraries and binaries work together.
for binary in "${binaries[@]}"; do
  case $engine in
    *buildah)
      container=$("$engine" from --quiet "$image")
      ran=$("$engine" run --isolation chroot "$container" -- "/$binary" --version) || {
        "$engine" rm "$container" >/dev/null
        say "/$binary --version failed in the image"
        exit 1
      }
      "$engine" rm "$container" >/dev/null
      ;;
    *) ran=$("$engine" run --rm --entrypoint "/$binary" "$image" --version) ;;
  esac
  [ "$ran" = "$binary $version" ] || {
    say "/$binary --version in the image says \"$ran\", not \"$binary $version\""
    exit 1
  }
  say "in the image: $ran"
done
case $engine in
  *docker)
    size=$("$engine" image inspect --format '{{.Size}}' "$image")
    user=$("$engine" image inspect --format '{{.Config.User}}' "$image")
    ;;
  *)
    size=$("$engine" inspect --type image --format '{{.Size}}' "$image" 2>/dev/null ||
      "$engine" images --format '{{.Size}}' "$image" | head -n 1)
    user=$("$engine" inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
    ;;
esac
if [ -n "${OCI_ARCHIVE:-}" ]; then
  rm -f "$OCI_ARCHIVE"
  case $engine in
    *docker) "$engine" save -o "$OCI_ARCHIVE" "$image" ;;
    *) "$engine" push "$image" "oci-archive:$OCI_ARCHIVE:$image" ;;
  esac
  say "written as an OCI archive to $OCI_ARCHIVE"
fi
say "$image built by $engine: size $size, runs as user $user, root from ${packages[*]};" \
  "$((built - started)) s compiling, $(($(date +%s) - built)) s for the image"
