//! Integration tests of the bootstrap provider: rendering, goldens, kubeadm and cloud-init checks, the controller on a real kube-apiserver.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod cli_render;
mod cli_validate;
mod cloud_init_schema;
mod common;
mod controller_on_apiserver;
mod file_templates_against_go;
mod ignition_against_flatcar;
mod init_lock_on_apiserver;
mod kubeadm_applies_patches;
mod kubeadm_validates_goldens;
mod manager_lifecycle;
mod render_golden;
mod render_rules;
mod token_lifecycle_on_apiserver;
mod tokens_on_apiserver;
mod webhooks_on_apiserver;
