//! Structured logs with `tracing`, as text for people or JSON for log pipelines.

use tracing_subscriber::{EnvFilter, fmt};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. The filter comes from `RUST_LOG` (default `info`).
pub fn init(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colored(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    // A second init (tests start several managers in one process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Whether text logs get terminal colors: only on a terminal, and not when `NO_COLOR` is set to anything
/// but the empty string (no-color.org). A pod's log, a file or a pipe gets plain text: escape codes there
/// end up verbatim in `kubectl logs` and in log pipelines.
fn colored(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colored;
    use std::ffi::OsStr;

    #[test]
    fn logs_are_colored_only_on_a_terminal_without_no_color() {
        assert!(colored(true, None));
        assert!(colored(true, Some(OsStr::new(""))));
        assert!(!colored(true, Some(OsStr::new("1"))));
        assert!(!colored(false, None), "a pod's log or a pipe");
    }
}
