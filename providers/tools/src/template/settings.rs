//! The values variables are substituted with, found where clusterctl finds them: values set for this
//! cluster (`CLUSTER_NAME`, `NAMESPACE`, counts, version) win over environment variables, which win over
//! the clusterctl configuration file — a flat `KEY: value` YAML map, as Sovereign Cloud Stack keeps its
//! cluster settings.
//!
//! As in clusterctl (viper): names in the file match case-insensitively, the environment is read by the
//! upper-cased name and an empty environment variable still counts as set. Numbers and booleans in the
//! file become text (`3`, `true`); a key without a value (`KEY:`) is unset; nested maps and lists (e.g.
//! clusterctl's own `providers:` list) are not variables.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Settings to substitute template variables with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Values set for this cluster by the command line, by lower-cased name.
    overrides: BTreeMap<String, String>,
    /// Environment variables, by exact name.
    env: BTreeMap<String, String>,
    /// Scalar values of the configuration file, by lower-cased name.
    file: BTreeMap<String, String>,
}

/// What the command line sets for the cluster to generate, as `clusterctl generate cluster` takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterOptions {
    /// The positional NAME: becomes `CLUSTER_NAME`.
    pub cluster_name: String,
    /// `--target-namespace`: becomes `NAMESPACE` (`default` when not given).
    pub target_namespace: Option<String>,
    /// `--kubernetes-version`: becomes `KUBERNETES_VERSION` when given.
    pub kubernetes_version: Option<String>,
    /// `--control-plane-machine-count`: else the setting, else 1.
    pub control_plane_machine_count: Option<i64>,
    /// `--worker-machine-count`: else the setting, else 0.
    pub worker_machine_count: Option<i64>,
}

/// Why settings could not be read or completed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The configuration file could not be read.
    #[error("cannot read {file}: {source}")]
    Read {
        /// The file as given.
        file: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The configuration file is not a flat YAML map.
    #[error("{file}:{line}: {message}")]
    Malformed {
        /// The file as given.
        file: String,
        /// Line of the problem, counting from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A value given for the cluster breaks clusterctl's rules for it.
    #[error("{name} {value:?}: {rule}")]
    Invalid {
        /// The variable (e.g. `CLUSTER_NAME`).
        name: &'static str,
        /// The value given.
        value: String,
        /// The rule it breaks.
        rule: String,
    },
}

impl Settings {
    /// Empty settings: no file, no environment.
    pub fn new() -> Settings {
        Settings::default()
    }

    /// Reads the configuration file at `clusterctl_yaml` (if any) and takes `env` (e.g.
    /// `std::env::vars()`) over it.
    pub fn load(
        clusterctl_yaml: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let settings = match clusterctl_yaml {
            Some(path) => {
                let file = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
                    file: file.clone(),
                    source,
                })?;
                Settings::from_clusterctl_yaml(&file, &text)?
            }
            None => Settings::new(),
        };
        Ok(settings.with_env(env))
    }

    /// Parses the text of a clusterctl configuration file; `file` only names it in errors.
    pub fn from_clusterctl_yaml(file: &str, text: &str) -> Result<Settings, SettingsError> {
        Ok(Settings {
            file: parse_clusterctl_yaml(file, text)?,
            ..Settings::default()
        })
    }

    /// These settings with `env` taking precedence over the file.
    pub fn with_env(mut self, env: impl IntoIterator<Item = (String, String)>) -> Settings {
        self.env.extend(env);
        self
    }

    /// Sets `name` for this cluster, over the environment and the file.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.overrides
            .insert(name.to_ascii_lowercase(), value.into());
    }

    /// Sets `name` as if the configuration file held it (for checking an edited file).
    pub(crate) fn set_in_file(&mut self, name: &str, value: &str) {
        self.file
            .insert(name.to_ascii_lowercase(), value.to_owned());
    }

    /// The value of `name`, if set anywhere.
    pub fn get(&self, name: &str) -> Option<&str> {
        let lower = name.to_ascii_lowercase();
        self.overrides
            .get(&lower)
            .or_else(|| self.env.get(&name.to_ascii_uppercase().replace('-', "_")))
            .or_else(|| self.file.get(&lower))
            .map(String::as_str)
    }

    /// Whether `name` was set for this cluster (by [`Settings::set`] or [`Settings::for_cluster`]).
    pub fn is_set_for_cluster(&self, name: &str) -> bool {
        self.overrides.contains_key(&name.to_ascii_lowercase())
    }

    /// Sets what `clusterctl generate cluster` sets from its arguments, checked by its rules:
    /// `CLUSTER_NAME`, `NAMESPACE`, `KUBERNETES_VERSION` (when given), `CONTROL_PLANE_MACHINE_COUNT` and
    /// `WORKER_MACHINE_COUNT` (from the option, else the settings, else 1 and 0).
    pub fn for_cluster(mut self, options: &ClusterOptions) -> Result<Settings, SettingsError> {
        let namespace = options.target_namespace.as_deref().unwrap_or("default");
        check_dns_label("NAMESPACE", namespace)?;
        check_dns_subdomain("CLUSTER_NAME", &options.cluster_name)?;
        if let Some(version) = &options.kubernetes_version {
            check_semantic_version("KUBERNETES_VERSION", version)?;
            self.set("KUBERNETES_VERSION", version.clone());
        }
        let control_plane = self.machine_count(
            "CONTROL_PLANE_MACHINE_COUNT",
            options.control_plane_machine_count,
            1,
        )?;
        let workers =
            self.machine_count("WORKER_MACHINE_COUNT", options.worker_machine_count, 0)?;
        self.set("NAMESPACE", namespace);
        self.set("CLUSTER_NAME", options.cluster_name.clone());
        self.set("CONTROL_PLANE_MACHINE_COUNT", control_plane.to_string());
        self.set("WORKER_MACHINE_COUNT", workers.to_string());
        Ok(self)
    }

    fn machine_count(
        &self,
        name: &'static str,
        option: Option<i64>,
        default: i64,
    ) -> Result<i64, SettingsError> {
        // clusterctl's defaults are also its lower bounds: 1 control-plane machine, 0 workers.
        let minimum = default;
        let count = match (option, self.get(name)) {
            (Some(count), _) => count,
            (None, Some(text)) => text.trim().parse().map_err(|_| SettingsError::Invalid {
                name,
                value: text.to_owned(),
                rule: "must be a whole number".into(),
            })?,
            (None, None) => default,
        };
        if count < minimum {
            return Err(SettingsError::Invalid {
                name,
                value: count.to_string(),
                rule: format!("must be {minimum} or more"),
            });
        }
        Ok(count)
    }
}

fn invalid(name: &'static str, value: &str, rule: &str) -> SettingsError {
    SettingsError::Invalid {
        name,
        value: value.to_owned(),
        rule: rule.to_owned(),
    }
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// clusterctl requires the target namespace to be a DNS-1123 label.
fn check_dns_label(name: &'static str, value: &str) -> Result<(), SettingsError> {
    if is_dns_label(value) {
        Ok(())
    } else {
        Err(invalid(
            name,
            value,
            "must be a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending \
             with a letter or digit",
        ))
    }
}

/// clusterctl requires the cluster name to be a DNS-1123 subdomain.
fn check_dns_subdomain(name: &'static str, value: &str) -> Result<(), SettingsError> {
    if value.len() <= 253 && value.split('.').all(is_dns_label) {
        Ok(())
    } else {
        Err(invalid(
            name,
            value,
            "must be a DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', each \
             '.'-separated part starting and ending with a letter or digit",
        ))
    }
}

/// clusterctl requires `--kubernetes-version` to be a semantic version (`v1.33.1`, `1.33.1`,
/// `v1.34.0-rc.1`).
fn check_semantic_version(name: &'static str, value: &str) -> Result<(), SettingsError> {
    let rest = value.strip_prefix('v').unwrap_or(value);
    let core_end = rest.find(['-', '+']).unwrap_or(rest.len());
    let (core, suffix) = rest.split_at(core_end);
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = |part: &&str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part.len() == 1 || !part.starts_with('0'))
    };
    let suffix_ok = suffix
        .chars()
        .skip(1)
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '+'))
        && suffix != "-"
        && suffix != "+";
    if parts.len() == 3 && parts.iter().all(numeric) && suffix_ok {
        Ok(())
    } else {
        Err(invalid(
            name,
            value,
            "must be a semantic version such as v1.33.1",
        ))
    }
}

/// The scalar settings of a clusterctl configuration file, by lower-cased name.
fn parse_clusterctl_yaml(
    file: &str,
    text: &str,
) -> Result<BTreeMap<String, String>, SettingsError> {
    let malformed = |line: usize, message: String| SettingsError::Malformed {
        file: file.to_owned(),
        line,
        message,
    };
    let parsed: Option<BTreeMap<String, Value>> =
        serde_saphyr::from_str(text).map_err(|error| {
            let line = error
                .location()
                .map_or(1, |location| location.line().max(1) as usize);
            malformed(
                line,
                format!("not a YAML map of settings (KEY: value): {error}"),
            )
        })?;
    let mut settings = BTreeMap::new();
    for (key, value) in parsed.unwrap_or_default() {
        let value = match value {
            Value::String(value) => value,
            Value::Bool(flag) => flag.to_string(),
            Value::Number(number) => number_text(&number),
            Value::Null | Value::Array(_) | Value::Object(_) => continue,
        };
        let lower = key.to_ascii_lowercase();
        if settings.insert(lower.clone(), value).is_some() {
            let line = top_level_keys(text)
                .filter(|entry| entry.key.eq_ignore_ascii_case(&lower))
                .nth(1)
                .map_or(1, |entry| entry.line);
            return Err(malformed(
                line,
                format!("{key} is set twice (clusterctl reads names without regard to case)"),
            ));
        }
    }
    Ok(settings)
}

/// A number as clusterctl turns it into text: integers in decimal, other numbers shortest, without a
/// trailing `.0`.
fn number_text(number: &serde_json::Number) -> String {
    match number.as_f64() {
        Some(float)
            if !number.is_i64()
                && !number.is_u64()
                && float.fract() == 0.0
                && float.abs() < 1e15 =>
        {
            format!("{float:.0}")
        }
        _ => number.to_string(),
    }
}

/// A `KEY: value` line at the top level of a settings file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyLine<'a> {
    /// Line number, counting from 1.
    pub line: usize,
    /// The key without quotes.
    pub key: &'a str,
    /// Byte range of the value in the line (without quotes, comment and trailing blanks).
    pub value: std::ops::Range<usize>,
    /// The quote around the value, if any.
    pub quote: Option<char>,
    /// The whole line, with its line ending.
    pub text: &'a str,
}

/// The top-level `KEY: value` lines of a YAML settings file (column 0, plain or quoted key, a value on
/// the same line). Lines of nested values, comments and block scalars are not keys.
pub(crate) fn top_level_keys(text: &str) -> impl Iterator<Item = KeyLine<'_>> {
    text.split_inclusive('\n')
        .enumerate()
        .filter_map(|(index, line)| key_line(index + 1, line))
}

fn key_line(number: usize, line: &str) -> Option<KeyLine<'_>> {
    let content = line.trim_end_matches(['\n', '\r']);
    let (key, after_key) = match content.chars().next()? {
        quote @ ('"' | '\'') => {
            let end = content[1..].find(quote)? + 1;
            (&content[1..end], end + 1)
        }
        c if c.is_ascii_alphanumeric() || c == '_' => {
            let end = content.find(':')?;
            (&content[..end], end)
        }
        _ => return None,
    };
    let rest = content[after_key..].strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let value_start = after_key + 1 + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
    let value_text = &content[value_start..];
    let (value, quote) = match value_text.chars().next() {
        Some('#') => (value_start..value_start, None),
        Some(quote @ ('"' | '\'')) => {
            let end = value_text[1..].find(quote)? + 1;
            (value_start + 1..value_start + end, Some(quote))
        }
        _ => {
            let end = value_text
                .find(" #")
                .or_else(|| value_text.find("\t#"))
                .unwrap_or(value_text.len());
            let trimmed = value_text[..end].trim_end_matches([' ', '\t']).len();
            (value_start..value_start + trimmed, None)
        }
    };
    Some(KeyLine {
        line: number,
        key,
        value,
        quote,
        text: line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCS_SETTINGS: &str = "\
# cluster settings
KUBERNETES_VERSION: v1.33.1
OPENSTACK_IMAGE_NAME: \"ubuntu-capi-image-${KUBERNETES_VERSION}\"
CONTROL_PLANE_MACHINE_COUNT: 3   # odd, for etcd
WORKER_MACHINE_COUNT: 3
CONTROL_PLANE_MACHINE_GEN: genc01
WORKER_MACHINE_GEN: 'genw01'
ETCD_UNSAFE_FS: false
MTU_VALUE: 0
SOME_RATIO: 2.0
EMPTY_VALUE:
RESTRICT_KUBEAPI: []
providers:
  - name: kubeadm
    url: /repo/bootstrap-components.yaml
    type: BootstrapProvider
";

    #[test]
    fn scs_settings_file_becomes_text_values() {
        let settings = Settings::from_clusterctl_yaml("clusterctl.yaml", SCS_SETTINGS).unwrap();
        for (name, value) in [
            ("KUBERNETES_VERSION", Some("v1.33.1")),
            (
                "OPENSTACK_IMAGE_NAME",
                Some("ubuntu-capi-image-${KUBERNETES_VERSION}"),
            ),
            ("CONTROL_PLANE_MACHINE_COUNT", Some("3")),
            ("WORKER_MACHINE_GEN", Some("genw01")),
            ("ETCD_UNSAFE_FS", Some("false")),
            ("MTU_VALUE", Some("0")),
            ("SOME_RATIO", Some("2")),
            ("kubernetes_version", Some("v1.33.1")),
            ("EMPTY_VALUE", None),
            ("RESTRICT_KUBEAPI", None),
            ("providers", None),
            ("UNKNOWN", None),
        ] {
            assert_eq!(settings.get(name), value, "{name}");
        }
    }

    #[test]
    fn environment_wins_over_the_file_and_cluster_options_over_both() {
        let env = [
            ("WORKER_MACHINE_GEN".to_owned(), "genw07".to_owned()),
            ("ETCD_UNSAFE_FS".to_owned(), String::new()),
            ("CLUSTER_NAME".to_owned(), "from-env".to_owned()),
        ];
        let settings = Settings::from_clusterctl_yaml("clusterctl.yaml", SCS_SETTINGS)
            .unwrap()
            .with_env(env)
            .for_cluster(&ClusterOptions {
                cluster_name: "prod".into(),
                worker_machine_count: Some(5),
                ..ClusterOptions::default()
            })
            .unwrap();
        assert_eq!(settings.get("WORKER_MACHINE_GEN"), Some("genw07"));
        // An empty environment variable is set (viper's AllowEmptyEnv, as clusterctl configures it).
        assert_eq!(settings.get("ETCD_UNSAFE_FS"), Some(""));
        assert_eq!(settings.get("CLUSTER_NAME"), Some("prod"));
        assert_eq!(settings.get("NAMESPACE"), Some("default"));
        assert_eq!(settings.get("CONTROL_PLANE_MACHINE_COUNT"), Some("3"));
        assert_eq!(settings.get("WORKER_MACHINE_COUNT"), Some("5"));
        assert_eq!(settings.get("KUBERNETES_VERSION"), Some("v1.33.1"));
        assert!(settings.is_set_for_cluster("CLUSTER_NAME"));
        assert!(!settings.is_set_for_cluster("KUBERNETES_VERSION"));
    }

    #[test]
    fn counts_default_like_clusterctl() {
        let settings = Settings::new()
            .for_cluster(&ClusterOptions {
                cluster_name: "a".into(),
                target_namespace: Some("team-a".into()),
                kubernetes_version: Some("v1.34.0-rc.1".into()),
                ..ClusterOptions::default()
            })
            .unwrap();
        assert_eq!(settings.get("CONTROL_PLANE_MACHINE_COUNT"), Some("1"));
        assert_eq!(settings.get("WORKER_MACHINE_COUNT"), Some("0"));
        assert_eq!(settings.get("NAMESPACE"), Some("team-a"));
        assert_eq!(settings.get("KUBERNETES_VERSION"), Some("v1.34.0-rc.1"));
    }

    #[test]
    fn cluster_options_are_checked_by_clusterctl_rules() {
        let check = |options: ClusterOptions, settings: Settings| {
            settings.for_cluster(&options).unwrap_err().to_string()
        };
        let named = |name: &str| ClusterOptions {
            cluster_name: name.into(),
            ..ClusterOptions::default()
        };
        assert!(
            check(named("Prod"), Settings::new())
                .starts_with("CLUSTER_NAME \"Prod\": must be a DNS-1123")
        );
        assert!(check(named(""), Settings::new()).starts_with("CLUSTER_NAME"));
        assert!(Settings::new().for_cluster(&named("prod.eu-1")).is_ok());
        let bad_namespace = ClusterOptions {
            target_namespace: Some("a.b".into()),
            ..named("prod")
        };
        assert!(check(bad_namespace, Settings::new()).starts_with("NAMESPACE \"a.b\""));
        for version in ["1.33", "v1.33.01", "latest", "v1.33.1-"] {
            let options = ClusterOptions {
                kubernetes_version: Some(version.into()),
                ..named("prod")
            };
            assert!(
                check(options, Settings::new()).contains("semantic version"),
                "{version}"
            );
        }
        let zero_control_planes = ClusterOptions {
            control_plane_machine_count: Some(0),
            ..named("prod")
        };
        assert_eq!(
            check(zero_control_planes, Settings::new()),
            "CONTROL_PLANE_MACHINE_COUNT \"0\": must be 1 or more"
        );
        let mut words = Settings::new();
        words.set("WORKER_MACHINE_COUNT", "three");
        assert_eq!(
            check(named("prod"), words),
            "WORKER_MACHINE_COUNT \"three\": must be a whole number"
        );
    }

    #[test]
    fn malformed_files_name_file_and_line() {
        for (text, line) in [
            ("A: 1\nB: [unclosed\nC: 3\n", 3),
            ("A: 1\n  B: 2\n", 2),
            ("- just\n- a list\n", 1),
            ("A: 1\nB: \"open\n", 2),
            ("A: 1\nB: 2\na: 3\n", 3),
        ] {
            let error = Settings::from_clusterctl_yaml("clusterctl.yaml", text).unwrap_err();
            let SettingsError::Malformed {
                file, line: found, ..
            } = &error
            else {
                panic!("{text:?}: {error}");
            };
            assert_eq!(file, "clusterctl.yaml");
            assert_eq!(*found, line, "{text:?}: {error}");
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("clusterctl.yaml:{line}: "))
            );
        }
        assert_eq!(
            Settings::from_clusterctl_yaml("c.yaml", "# only comments\n").unwrap(),
            Settings::new()
        );
    }

    #[test]
    fn load_reads_the_file_and_names_it_when_unreadable() {
        let error =
            Settings::load(Some(Path::new("/nonexistent/clusterctl.yaml")), []).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("cannot read /nonexistent/clusterctl.yaml: ")
        );
        let settings = Settings::load(None, [("A".to_owned(), "1".to_owned())]).unwrap();
        assert_eq!(settings.get("A"), Some("1"));
    }

    #[test]
    fn key_lines_find_top_level_values_with_quotes_and_comments() {
        let text = "# c\nA: genc01  # counter\n\"B\": \"genw2\"\nnested:\n  C: 1\nD:\nE: #only comment\nurl: http://x:1\n";
        let found: Vec<_> = top_level_keys(text)
            .map(|entry| {
                (
                    entry.line,
                    entry.key,
                    &entry.text[entry.value.clone()],
                    entry.quote,
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                (2, "A", "genc01", None),
                (3, "B", "genw2", Some('"')),
                (4, "nested", "", None),
                (6, "D", "", None),
                (7, "E", "", None),
                (8, "url", "http://x:1", None),
            ]
        );
    }
}
