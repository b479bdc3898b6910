//! `testenv up`: the local management plane for people — etcd + kube-apiserver on 127.0.0.1, CRDs from
//! folders installed, optional manager processes started against it; runs until Ctrl-C or SIGTERM.
//!
//! Usage: testenv up [--dir DIR] [--crds DIR]... [--cluster-api-core] [--manager BINARY]... [--exit-when-ready]
//!
//! `--cluster-api-core` also runs Cluster API's own core manager (built by `hack/install-testenv.sh`)
//! with its CRDs and webhooks: Machines, MachineSets, MachineDeployments, MachineHealthChecks and the
//! topology controller, for `sim run --core cluster-api`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use testenv::ManagementPlane;
use testenv::manager::ManagerProcess;

struct Args {
    dir: Option<PathBuf>,
    crds: Vec<PathBuf>,
    managers: Vec<PathBuf>,
    cluster_api_core: bool,
    exit_when_ready: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("up") => {}
        Some("-h" | "--help") | None => return Err(usage()),
        Some(other) => return Err(format!("unknown command {other:?}\n{}", usage())),
    }
    let mut parsed = Args {
        dir: None,
        crds: vec![],
        managers: vec![],
        cluster_api_core: false,
        exit_when_ready: false,
    };
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or(format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--dir" => parsed.dir = Some(value("--dir")?),
            "--crds" => parsed.crds.push(value("--crds")?),
            "--manager" => parsed.managers.push(value("--manager")?),
            "--cluster-api-core" => parsed.cluster_api_core = true,
            "--exit-when-ready" => parsed.exit_when_ready = true,
            other => return Err(format!("unknown flag {other:?}\n{}", usage())),
        }
    }
    Ok(parsed)
}

fn usage() -> String {
    "usage: testenv up [--dir DIR] [--crds DIR]... [--cluster-api-core] [--manager BINARY]... \
     [--exit-when-ready]"
        .into()
}

fn read_crds(dirs: &[PathBuf]) -> Result<Vec<CustomResourceDefinition>, String> {
    let mut crds = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("read {}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("kustomization.yaml")
            })
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("read {}: {e}", file.display()))?;
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
                .map_err(|e| format!("parse {}: {e}", file.display()))?;
            crds.push(crd);
        }
    }
    Ok(crds)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testenv: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let args = parse()?;
    let started = Instant::now();
    let crds = read_crds(&args.crds)?;
    println!("starting etcd and kube-apiserver on 127.0.0.1 ...");
    let plane = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            let dir = tempfile::Builder::new()
                .prefix("testenv-")
                .tempdir_in(dir)
                .map_err(|e| format!("create a folder in {}: {e}", dir.display()))?;
            ManagementPlane::start_in(dir).await
        }
        None => ManagementPlane::start().await,
    }
    .map_err(|e| e.to_string())?;
    println!(
        "  kube-apiserver {} ready after {:.1?}",
        plane.apiserver().url(),
        started.elapsed()
    );
    plane.install_crds(&crds).await.map_err(|e| e.to_string())?;
    println!("  {} CRDs installed", crds.len());

    let mut managers = Vec::new();
    if args.cluster_api_core {
        let release = testenv::capi::ClusterApi::find().map_err(|e| e.to_string())?;
        let mut core = testenv::capi::start_core(&plane, &release, &[])
            .await
            .map_err(|e| format!("Cluster API's core manager: {e}"))?;
        let process = core.process();
        println!(
            "  Cluster API's core manager {} running (pid {}, log {})",
            release.version().unwrap_or_default(),
            process.pid(),
            process.log_path().display()
        );
        managers.push(core);
    }
    for binary in &args.managers {
        let local = testenv::webhooks::local_args(binary);
        let mut manager =
            ManagerProcess::start(binary, plane.kubeconfig_path(), plane.dir(), local)
                .map_err(|e| e.to_string())?;
        manager
            .wait_ready(Duration::from_secs(60))
            .await
            .map_err(|e| e.to_string())?;
        let webhooks = manager
            .webhook()
            .map(|w| {
                format!(
                    ", webhooks at {} trusting {}/ca.crt",
                    w.url(),
                    w.cert_dir.display()
                )
            })
            .unwrap_or_default();
        if let Some(serving) = manager.webhook() {
            let group = testenv::webhooks::owned_group(binary);
            testenv::webhooks::route_group_to(
                &plane,
                group,
                &crds,
                &serving.url(),
                &serving.ca_pem,
            )
            .await
            .map_err(|e| format!("registering the webhooks of {}: {e}", binary.display()))?;
        }
        let process = manager.process();
        println!(
            "  {} running (pid {}, log {}{webhooks})",
            process.name(),
            process.pid(),
            process.log_path().display()
        );
        managers.push(manager);
    }

    let kubeconfig = plane.kubeconfig_path().display().to_string();
    println!("\nmanagement plane ready in {:.1?}", started.elapsed());
    println!("  export KUBECONFIG={kubeconfig}");
    println!("  kubectl get crds");
    println!("  kubectl explain kubeadmcontrolplane.spec.rollout");
    if args.exit_when_ready {
        println!("stopping (--exit-when-ready)");
    } else {
        println!("press Ctrl-C to stop everything");
        wait_for_signal().await;
        println!("stopping");
    }
    for mut manager in managers {
        manager.process().stop();
    }
    drop(plane);
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
