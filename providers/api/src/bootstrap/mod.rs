//! `bootstrap.cluster.x-k8s.io`: KubeadmConfig and KubeadmConfigTemplate.

pub mod conversion;
pub mod defaults;
pub mod ignition;
pub mod v1beta1;
pub mod v1beta2;
pub mod validation;
