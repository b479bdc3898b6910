//! `controlplane.cluster.x-k8s.io`: KubeadmControlPlane and KubeadmControlPlaneTemplate.

/// The API group of KubeadmControlPlane and KubeadmControlPlaneTemplate.
pub const GROUP: &str = "controlplane.cluster.x-k8s.io";

pub mod conditions;
pub mod conversion;
pub mod defaults;
pub mod etcd_backup;
pub mod events;
pub mod v1beta1;
pub mod v1beta2;
pub mod validation;
