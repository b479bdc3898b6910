//! Render throughput: `cargo bench -p kubeadm-bootstrap --bench render`.
//!
//! Renders the realistic test fixture for every role x format x kubeadm API a fixed number of times and
//! prints the mean time per render and the output size. Numbers, not assertions: compare runs by eye.

#[path = "../tests/integration/common.rs"]
mod common;

use std::hint::black_box;
use std::time::Instant;

use kubeadm_api::bootstrap::v1beta2::Format;
use kubeadm_bootstrap::render::Role;

const ITERATIONS: u32 = 2_000;

fn main() {
    println!(
        "{:<22} {:<13} {:<8} {:>12} {:>10}",
        "role", "format", "kubeadm", "per render", "bytes"
    );
    for role in [Role::Init, Role::ControlPlaneJoin, Role::WorkerJoin] {
        for format in [Format::CloudConfig, Format::Ignition] {
            for (api, version) in [
                ("v1beta3", common::V1BETA3_VERSION),
                ("v1beta4", common::V1BETA4_VERSION),
            ] {
                let spec = common::fixture_spec_with_format(format);
                let size = common::render_with(&spec, role, version)
                    .expect("fixture renders")
                    .len();
                let started = Instant::now();
                for _ in 0..ITERATIONS {
                    black_box(common::render_with(black_box(&spec), role, version).unwrap());
                }
                let per = started.elapsed() / ITERATIONS;
                println!(
                    "{:<22} {:<13} {:<8} {:>10.1?} {:>10}",
                    format!("{role:?}"),
                    format!("{format:?}"),
                    api,
                    per,
                    size
                );
            }
        }
    }
}
