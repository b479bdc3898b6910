//! A kubeadm cluster as both managers see it from the management cluster: its certificates
//! (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa` Secrets, looked up or generated), its admin kubeconfig Secret
//! (written and renewed by the control plane), a client for its API server built from that Secret, and
//! its control-plane endpoint, and whether it is paused.

pub mod certificates;
pub mod connection;
pub mod endpoint;
pub mod kubeconfig;
pub mod paused;
pub mod secret_cache;
pub mod workload;

pub use certificates::{CertPem, ClusterCertificates};
pub use secret_cache::SecretCache;
