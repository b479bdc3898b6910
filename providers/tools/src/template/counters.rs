//! Generation counters in a settings file: Sovereign Cloud Stack rolls a machine group by bumping
//! `CONTROL_PLANE_MACHINE_GEN` (`genc01` → `genc02`) or `WORKER_MACHINE_GEN` (`genw01` → `genw02`) in
//! its clusterctl.yaml and re-applying the rendered template: the new counter gives new template names,
//! and the controllers roll every machine built from the old ones.
//!
//! The bump edits only the value on the counter's line; every other byte of the file stays as it was,
//! and the file is replaced atomically, or not at all.

use std::fmt;
use std::io::Write;
use std::path::Path;

use super::settings::{Settings, top_level_keys};

/// Variable holding the control-plane generation counter.
pub const CONTROL_PLANE_MACHINE_GEN: &str = "CONTROL_PLANE_MACHINE_GEN";
/// Variable holding the worker generation counter.
pub const WORKER_MACHINE_GEN: &str = "WORKER_MACHINE_GEN";

/// Why a counter could not be bumped. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum BumpError {
    /// The file could not be read or replaced.
    #[error("{file}: {action}: {source}")]
    Io {
        /// The file as given.
        file: String,
        /// What was being done.
        action: &'static str,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file or the counter is not what a bump needs.
    #[error("{file}:{line}: {message}")]
    Rejected {
        /// The file as given.
        file: String,
        /// Line of the problem, counting from 1.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
}

/// A counter value that cannot be bumped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotACounter {
    /// Why.
    pub reason: String,
}

impl fmt::Display for NotACounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A bump done (or planned): the old and new value and the file text with the new value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bump {
    /// The counter variable.
    pub variable: String,
    /// Line of the counter, counting from 1.
    pub line: usize,
    /// Value before.
    pub old: String,
    /// Value after.
    pub new: String,
    /// The whole file with the new value.
    pub text: String,
}

/// The next value of a counter: its trailing number plus one, zero-padded to at least the old width
/// (`genc01` → `genc02`, `genw3` → `genw4`, `genc09` → `genc10`, `genc99` → `genc100`).
pub fn next_counter(value: &str) -> Result<String, NotACounter> {
    let prefix = value.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &value[prefix.len()..];
    if digits.is_empty() {
        return Err(NotACounter {
            reason: format!(
                "{value:?} does not end in digits; a generation counter looks like genc01 or genw01"
            ),
        });
    }
    let number: u64 = digits
        .parse()
        .ok()
        .and_then(|number: u64| number.checked_add(1))
        .ok_or_else(|| NotACounter {
            reason: format!("{value:?} ends in a number too large to count on"),
        })?;
    Ok(format!("{prefix}{number:0width$}", width = digits.len()))
}

/// Bumps `variable` in the text of a settings file; `file` only names it in errors. The file must be a
/// valid settings file with the counter set once, at the top level, on one line.
pub fn bump_in_text(file: &str, text: &str, variable: &str) -> Result<Bump, BumpError> {
    let rejected = |line: usize, message: String| BumpError::Rejected {
        file: file.to_owned(),
        line,
        message,
    };
    let before = Settings::from_clusterctl_yaml(file, text).map_err(|error| match error {
        super::SettingsError::Malformed { line, message, .. } => rejected(line, message),
        other => rejected(1, other.to_string()),
    })?;
    let mut entries = top_level_keys(text).filter(|entry| entry.key.eq_ignore_ascii_case(variable));
    let Some(entry) = entries.next() else {
        return Err(rejected(
            1,
            format!(
                "{variable} is not set; add a line such as `{variable}: {}`",
                if variable == WORKER_MACHINE_GEN {
                    "genw01"
                } else {
                    "genc01"
                }
            ),
        ));
    };
    if let Some(again) = entries.next() {
        return Err(rejected(again.line, format!("{variable} is set twice")));
    }
    let old = &entry.text[entry.value.clone()];
    if before.get(variable) != Some(old) {
        return Err(rejected(
            entry.line,
            format!(
                "{variable} is not a one-line value here; write it as `{variable}: genc01` to bump it"
            ),
        ));
    }
    let new =
        next_counter(old).map_err(|error| rejected(entry.line, format!("{variable}: {error}")))?;
    let line_start = entry.text.as_ptr() as usize - text.as_ptr() as usize;
    let start = line_start + entry.value.start;
    let end = line_start + entry.value.end;
    let bumped = format!("{}{new}{}", &text[..start], &text[end..]);
    // The edit must change exactly this one value: re-read the file to prove it.
    let after = Settings::from_clusterctl_yaml(file, &bumped).map_err(|error| {
        rejected(
            entry.line,
            format!("the bumped file would not read back ({error}); bump {variable} by hand"),
        )
    })?;
    let mut expected = before;
    expected.set_in_file(variable, &new);
    if after != expected {
        return Err(rejected(
            entry.line,
            format!("bumping {variable} here would change other settings; bump it by hand"),
        ));
    }
    Ok(Bump {
        variable: variable.to_owned(),
        line: entry.line,
        old: old.to_owned(),
        new,
        text: bumped,
    })
}

/// Bumps `variable` in the settings file at `path` and replaces the file atomically (a new file in the
/// same folder, with the old permissions, renamed over it). On any error the file is untouched.
pub fn bump_file(path: &Path, variable: &str) -> Result<Bump, BumpError> {
    let file = path.display().to_string();
    let io = |action: &'static str| {
        let file = file.clone();
        move |source| BumpError::Io {
            file,
            action,
            source,
        }
    };
    // Replace the file a symbolic link points to, not the link.
    let target = std::fs::canonicalize(path).map_err(io("cannot read"))?;
    let text = std::fs::read_to_string(&target).map_err(io("cannot read"))?;
    let bump = bump_in_text(&file, &text, variable)?;
    let permissions = std::fs::metadata(&target)
        .map_err(io("cannot read"))?
        .permissions();
    let folder = target.parent().unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = folder.join(format!(".{name}.bump-{}", std::process::id()));
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        out.write_all(bump.text.as_bytes())?;
        out.set_permissions(permissions)?;
        out.sync_all()?;
        std::fs::rename(&temporary, &target)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(io("cannot replace")(error));
    }
    Ok(bump)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_count_up_keeping_their_width() {
        for (old, new) in [
            ("genc01", "genc02"),
            ("genw3", "genw4"),
            ("genc09", "genc10"),
            ("genc99", "genc100"),
            ("genw009", "genw010"),
            ("7", "8"),
            ("geno01", "geno02"),
        ] {
            assert_eq!(next_counter(old).unwrap(), new, "{old}");
        }
        assert!(
            next_counter("genc")
                .unwrap_err()
                .reason
                .contains("does not end in digits")
        );
        assert!(next_counter("").is_err());
        assert!(next_counter("gen99999999999999999999999").is_err());
    }

    const SETTINGS: &str = "\
# Sovereign Cloud Stack cluster settings\r
KUBERNETES_VERSION: v1.33.1
CONTROL_PLANE_MACHINE_GEN: genc01   # bump to roll the control plane
WORKER_MACHINE_GEN: \"genw09\"
OTHER_GEN: genx
";

    #[test]
    fn a_bump_changes_only_the_counter_value() {
        let bump = bump_in_text("clusterctl.yaml", SETTINGS, CONTROL_PLANE_MACHINE_GEN).unwrap();
        assert_eq!(
            (bump.old.as_str(), bump.new.as_str(), bump.line),
            ("genc01", "genc02", 3)
        );
        assert_eq!(
            bump.text,
            SETTINGS.replace("genc01   #", "genc02   #"),
            "every other byte stays"
        );
        let bump = bump_in_text("clusterctl.yaml", SETTINGS, WORKER_MACHINE_GEN).unwrap();
        assert_eq!(bump.text, SETTINGS.replace("\"genw09\"", "\"genw10\""));
    }

    #[test]
    fn bad_counters_are_rejected_with_file_line_and_variable() {
        let error = bump_in_text("c.yaml", SETTINGS, "OTHER_GEN").unwrap_err();
        assert_eq!(
            error.to_string(),
            "c.yaml:5: OTHER_GEN: \"genx\" does not end in digits; a generation counter looks like \
             genc01 or genw01"
        );
        let error = bump_in_text("c.yaml", "A: 1\n", WORKER_MACHINE_GEN).unwrap_err();
        assert_eq!(
            error.to_string(),
            "c.yaml:1: WORKER_MACHINE_GEN is not set; add a line such as `WORKER_MACHINE_GEN: genw01`"
        );
        let twice = "WORKER_MACHINE_GEN: genw1\nworker_machine_gen: genw2\n";
        let error = bump_in_text("c.yaml", twice, WORKER_MACHINE_GEN).unwrap_err();
        assert!(error.to_string().starts_with("c.yaml:2: "), "{error}");
        let block = "WORKER_MACHINE_GEN: >-\n  genw1\n";
        let error = bump_in_text("c.yaml", block, WORKER_MACHINE_GEN).unwrap_err();
        assert!(
            error.to_string().contains("not a one-line value"),
            "{error}"
        );
        let lower_case = "worker_machine_gen: genw1 # as viper reads it\n";
        let bump = bump_in_text("c.yaml", lower_case, WORKER_MACHINE_GEN).unwrap();
        assert_eq!(bump.text, "worker_machine_gen: genw2 # as viper reads it\n");
        let malformed = "A: [\nWORKER_MACHINE_GEN: genw1\n";
        assert!(bump_in_text("c.yaml", malformed, WORKER_MACHINE_GEN).is_err());
    }
}
