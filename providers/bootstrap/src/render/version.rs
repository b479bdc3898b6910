//! Release versions, as rendering decisions compare them (one parser, in the API crate).

pub use kubeadm_api::version::KubeVersion;
