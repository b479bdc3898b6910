//! `bootstrap.cluster.x-k8s.io/v1beta1`: the older, still served and deprecated version of
//! KubeadmConfig and KubeadmConfigTemplate.

pub mod config;
pub mod kubeadm;

pub use config::*;
pub use kubeadm::*;
