//! `bootstrap.cluster.x-k8s.io/v1beta2`, the storage version: KubeadmConfig, KubeadmConfigTemplate
//! and the kubeadm configuration types they embed.

mod config;
mod kubeadm;

pub use config::*;
pub use kubeadm::*;
