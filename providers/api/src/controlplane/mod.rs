//! `controlplane.cluster.x-k8s.io`: KubeadmControlPlane and KubeadmControlPlaneTemplate.

pub mod conversion;
pub mod defaults;
pub mod v1beta1;
pub mod v1beta2;
pub mod validation;
