//! `bootstrap.cluster.x-k8s.io`: KubeadmConfig and KubeadmConfigTemplate.

/// The API group of KubeadmConfig and KubeadmConfigTemplate.
pub const GROUP: &str = "bootstrap.cluster.x-k8s.io";

pub mod conditions;
pub mod conversion;
pub mod defaults;
pub mod events;
pub mod file_template;
pub mod ignition;
pub mod v1beta1;
pub mod v1beta2;
pub mod validation;
