//! `xtask`: `crdgen` and `release-manifests`, behind `make manifests`, `make check-manifests` and
//! `make release-manifests`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use xtask::{crdgen, release};

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "Build tooling: manifests and release artifacts from the Rust types"
)]
enum Command {
    /// Write config/ and e2e/config/crd from the Rust types; with --check write nothing and fail when a
    /// file on disk differs, naming the file and the command that fixes it.
    Crdgen {
        #[arg(long)]
        check: bool,
        /// The repository root.
        #[arg(default_value = ".")]
        root: PathBuf,
    },
    /// Write the clusterctl local repository of this release.
    ReleaseManifests {
        /// Where to write it (default: `out` in the repository root).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The repository root.
        #[arg(default_value = ".")]
        root: PathBuf,
    },
}

fn main() -> ExitCode {
    match Command::parse() {
        Command::Crdgen { check: false, root } => match crdgen::write(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Crdgen { check: true, root } => {
            let stale = crdgen::stale(&root);
            if stale.is_empty() {
                return ExitCode::SUCCESS;
            }
            for s in stale {
                eprintln!("crdgen: {s}");
            }
            eprintln!("crdgen: manifests are stale; run `make manifests` and commit the result");
            ExitCode::FAILURE
        }
        Command::ReleaseManifests { out, root } => {
            let out = out.unwrap_or_else(|| root.join("out"));
            match release::write(&root, &out) {
                Ok(written) => {
                    for path in written {
                        println!("{}", path.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("release-manifests: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
