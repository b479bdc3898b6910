# Both managers in one image, as the release manifests name it (KUBEADM_PROVIDERS_IMAGE, default
# docker.io/library/kubeadm-providers:v<version>); each Deployment runs its own binary (/bootstrap-manager,
# /controlplane-manager). Build with `make image`: hack/image.sh compiles the managers on the build
# machine and lays out this file's context, target/image: the binaries under bin/, and under rootfs/ the
# Debian packages they link against (glibc and libgcc of the build machine, so the loader is the one they
# were linked with), its CA bundle and the non-root user 65532. Nothing is pulled, so the image builds
# where no registry is reachable.
FROM scratch
COPY rootfs/ /
COPY bin/bootstrap-manager bin/controlplane-manager /
USER 65532:65532
ENTRYPOINT ["/controlplane-manager"]
