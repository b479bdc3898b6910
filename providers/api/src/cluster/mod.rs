//! `cluster.x-k8s.io`: the subset of core Cluster API types the providers read and write.
//! In production their CRDs come from `clusterctl init`; ours serve the tests.

/// The API group of the core Cluster API kinds.
pub const GROUP: &str = "cluster.x-k8s.io";

pub mod v1beta2;
