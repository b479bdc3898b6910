//! The manager arguments the clusterctl components put in each Deployment, with every variable at its
//! default, are accepted by the real binaries (clap parses and checks every flag before `--help`).

use crate::common;

use std::path::Path;
use std::process::Command;

use xtask::components::{self, Provider};

const CONTROLPLANE_MANAGER: &str = env!("CARGO_BIN_EXE_controlplane-manager");

/// The container arguments of `provider`'s Deployment, `${NAME:=default}` replaced by `default`.
fn deployment_args(provider: Provider) -> Vec<String> {
    let deployment = components::objects(provider)
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|arg| {
            let arg = arg.as_str().unwrap();
            match arg.find("${") {
                Some(start) => {
                    let end = arg.rfind('}').unwrap();
                    let (_, default) = arg[start + 2..end].split_once(":=").unwrap();
                    format!("{}{default}{}", &arg[..start], &arg[end + 1..])
                }
                None => arg.to_owned(),
            }
        })
        .collect()
}

#[test]
fn both_managers_accept_their_deployment_arguments() {
    let bootstrap = common::bootstrap_manager(CONTROLPLANE_MANAGER);
    for (provider, binary) in [
        (Provider::Bootstrap, bootstrap.as_path()),
        (Provider::ControlPlane, Path::new(CONTROLPLANE_MANAGER)),
    ] {
        let args = deployment_args(provider);
        assert_eq!(args[0], "run");
        assert!(
            args.iter().all(|a| !a.contains('$')),
            "{args:?}: a variable was left"
        );
        let output = Command::new(binary)
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{provider:?}: {} {args:?} was refused: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
