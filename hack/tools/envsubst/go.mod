// clusterctl-envsubst: clusterctl's own template processor (and drone/envsubst under it) answering for
// the templates the tests give it, so that `generate cluster` is compared with the real thing. A module of
// its own, so that Cluster API's requirements do not move the versions ../ (ignition-check) builds with.
// The sigs.k8s.io/cluster-api version below is the clusterctl the comparison is against; keep it with
// ../capi.
module github.com/kubeadm-providers/hack/tools/envsubst

go 1.26.0

require sigs.k8s.io/cluster-api v1.14.2

require github.com/drone/envsubst/v2 v2.0.0-20210730161058-179042472c46 // indirect

// sigs.k8s.io/cluster-api requires its api module at v0.0.0 and replaces it with ./api, which only works
// inside its own repository; the tests of the package this uses import it (go mod tidy loads them).
replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api v1.14.2
