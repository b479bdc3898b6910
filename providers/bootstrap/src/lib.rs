//! The kubeadm bootstrap provider: turns a KubeadmConfig plus facts about its Cluster and Machine into the
//! user data that bootstraps a node.

/// Field manager of every write the bootstrap provider makes.
pub const FIELD_MANAGER: &str = "kubeadm-bootstrap";

pub mod controller;
pub mod init_lock;
pub mod render;
pub mod tokens;
pub mod webhooks;
