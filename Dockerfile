# Both managers in one image, as the release manifests name it (KUBEADM_PROVIDERS_IMAGE, default
# kubeadm-providers:v<version>); each Deployment runs its own binary (/bootstrap-manager,
# /controlplane-manager). Build with `make image`.

FROM docker.io/library/rust:1-bookworm AS build
# etcd-client compiles etcd's protobufs with protoc.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kubeadm-bootstrap -p kubeadm-controlplane \
      --bin bootstrap-manager --bin controlplane-manager \
 && install -D -m 0755 target/release/bootstrap-manager /out/bootstrap-manager \
 && install -D -m 0755 target/release/controlplane-manager /out/controlplane-manager

# glibc, CA certificates and a non-root user (65532), nothing else.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/bootstrap-manager /out/controlplane-manager /
USER 65532:65532
ENTRYPOINT ["/controlplane-manager"]
