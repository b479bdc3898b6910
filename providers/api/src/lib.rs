//! API types of the kubeadm bootstrap and control-plane providers.
//!
//! Field names and semantics follow Cluster API v1.14 so that objects written by the Go providers are
//! read by ours unchanged, and the other way round. Each API group has a module per served version;
//! v1beta2 is the storage version (the conversion hub), v1beta1 is still served.

pub mod bootstrap;
pub mod cluster;
pub mod controlplane;
pub mod conversion;
pub mod crd;
pub mod etcd_release;
pub mod events;
pub mod meta;
pub mod rbac;
pub mod reference;
pub mod validation;
pub mod version;
pub mod webhook;
