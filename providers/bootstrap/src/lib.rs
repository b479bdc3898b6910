//! The kubeadm bootstrap provider: turns a KubeadmConfig plus facts about its Cluster and Machine into the
//! user data that bootstraps a node.

pub mod render;
