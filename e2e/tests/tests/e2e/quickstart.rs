//! The README's first command: `quickstart` brings up everything and a 3 + 2 cluster, says how to use it,
//! and (with `--exit-when-ready`) stops every process it started.

use std::process::Command;
use std::time::Instant;

#[test]
fn quickstart_reaches_a_ready_cluster_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .args(["--exit-when-ready", "--timeout-seconds", "600", "--dir"])
        .arg(dir.path())
        .output()
        .expect("quickstart runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "quickstart failed:\n{stdout}\n{stderr}"
    );
    println!("quickstart ready and stopped in {:.1?}", started.elapsed());
    for expected in [
        "control plane: 3/3 ready (3 machines, 3 up to date)",
        "workers: 2/2 with a Node",
        "the cluster is ready",
        "export KUBECONFIG=",
        "bump-generation --control-plane",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing in:\n{stdout}"
        );
    }
    // Its run folder (management plane, nodes, settings) is gone with it.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
