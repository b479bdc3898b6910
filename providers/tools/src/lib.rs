//! What the managers do without a cluster, behind their offline subcommands: [`template`] renders
//! cluster templates as `clusterctl generate cluster` does and bumps generation counters
//! (`controlplane-manager generate cluster`, `bump-generation`), [`validate`] checks manifests against
//! the admission rules (`validate` of both managers), [`render`] reads what `bootstrap-manager render`
//! renders from. [`variables`] reads `${VAR}` expressions and [`yaml`] splits multi-document files for
//! all of them.

use std::process::ExitCode;

pub mod render;
pub mod template;
pub mod validate;
pub mod variables;
pub mod yaml;

mod envsubst;

/// The exit code of a command that failed with `result`, printing the failure as `<context>: <message>`
/// on standard error.
pub fn exit_code(context: &str, result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{context}: {message}");
            ExitCode::FAILURE
        }
    }
}
