//! The `validate` subcommand of both managers: checks manifests offline against the admission rules of
//! the kinds the manager owns, and ignores every other kind.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use super::check_documents;

/// Arguments of `<manager> validate`.
#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// YAML files to check (multi-document files are fine); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE", num_args = 1.., required = true)]
    pub files: Vec<PathBuf>,
}

/// Checks every file for objects of `groups`, prints one line per problem on stdout and a summary on
/// stderr. Exit code 1 when any problem (or an unreadable file) was found.
pub fn run_validate(args: &ValidateArgs, groups: &[&str]) -> ExitCode {
    let mut checked = 0;
    let mut problems = 0;
    for file in &args.files {
        let name = file.display().to_string();
        let text = if name == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        } else {
            std::fs::read_to_string(file)
        };
        let text = match text {
            Ok(text) => text,
            Err(error) => {
                println!("{name}: cannot read: {error}");
                problems += 1;
                continue;
            }
        };
        let report = check_documents(&name, &text, groups);
        checked += report.checked;
        problems += report.problems.len();
        for problem in &report.problems {
            println!("{problem}");
        }
        for warning in &report.warnings {
            eprintln!("warning: {warning}");
        }
    }
    let documents = if checked == 1 {
        "document"
    } else {
        "documents"
    };
    if problems == 0 {
        eprintln!("{checked} {documents} checked, no problems");
        ExitCode::SUCCESS
    } else {
        let found = if problems == 1 { "problem" } else { "problems" };
        eprintln!("{checked} {documents} checked, {problems} {found}");
        ExitCode::FAILURE
    }
}
