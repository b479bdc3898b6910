//! `controlplane.cluster.x-k8s.io`: KubeadmControlPlane and KubeadmControlPlaneTemplate.

pub mod conversion;
pub mod v1beta1;
pub mod v1beta2;
