//! `controlplane-manager generate cluster`: renders a cluster template the way `clusterctl generate
//! cluster` does (same variable syntax, same places to look for values), and `bump-generation`: counts
//! up a Sovereign Cloud Stack generation counter in the settings file so the next render rolls a group
//! of machines.
//!
//! [`crate::variables`] parses and substitutes `${VAR}` expressions, [`settings`] finds the values,
//! [`target_namespace`] moves the objects into the target namespace, [`counters`] bumps
//! `CONTROL_PLANE_MACHINE_GEN` / `WORKER_MACHINE_GEN`, [`command`] holds the two subcommands. All of it
//! is pure but for [`Settings::load`], [`counters::bump_file`] and [`command`].

pub mod command;
pub mod counters;
pub mod settings;
pub mod target_namespace;

use std::fmt;

pub use crate::variables::{SyntaxError, Template, TemplateVariable};
pub use counters::{
    Bump, BumpError, CONTROL_PLANE_MACHINE_GEN, NotACounter, WORKER_MACHINE_GEN, bump_file,
    bump_in_text, next_counter,
};
pub use settings::{ClusterOptions, Settings, SettingsError};

/// Why a template could not be rendered. Nothing is rendered then.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GenerateError {
    /// A `${…}` expression is malformed or not supported.
    #[error("{template}:{}: {}", .error.line, .error.message)]
    Syntax {
        /// The template as named by the caller.
        template: String,
        /// Where and what.
        error: SyntaxError,
    },
    /// The rendered text is not YAML, so its objects cannot be put into the target namespace.
    #[error("{template}: line {line} of the rendered output is not YAML: {message}")]
    NotYaml {
        /// The template as named by the caller.
        template: String,
        /// Line in the rendered output, counting from 1.
        line: usize,
        /// What the YAML parser said.
        message: String,
    },
    /// Required variables have no value; every one is listed with the line of its first use.
    #[error("{}", MissingList { template, missing })]
    MissingVariables {
        /// The template as named by the caller.
        template: String,
        /// The variables, in order of first use.
        missing: Vec<TemplateVariable>,
    },
}

struct MissingList<'a> {
    template: &'a str,
    missing: &'a [TemplateVariable],
}

impl fmt::Display for MissingList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.missing.len();
        let variables = if count == 1 { "variable" } else { "variables" };
        write!(
            f,
            "{}: no value for {count} required {variables}; set them in the clusterctl configuration \
             file (--config) or as environment variables:",
            self.template
        )?;
        for variable in self.missing {
            write!(
                f,
                "\n  {}:{}: {}",
                self.template, variable.line, variable.name
            )?;
        }
        Ok(())
    }
}

/// Renders `template` with `settings` as `clusterctl generate cluster` does; `template_name` only names
/// it in errors. Fails, rendering nothing, when the syntax is wrong or any required variable is unset.
/// When `NAMESPACE` was set for the cluster ([`Settings::for_cluster`]), every namespaced object ends up
/// in that namespace, as clusterctl puts them into its target namespace.
pub fn generate(
    template: &str,
    template_name: &str,
    settings: &Settings,
) -> Result<String, GenerateError> {
    let parsed = parse(template, template_name)?;
    let missing = parsed.missing(|name| settings.get(name));
    if !missing.is_empty() {
        return Err(GenerateError::MissingVariables {
            template: template_name.to_owned(),
            missing,
        });
    }
    let rendered =
        parsed
            .render(|name| settings.get(name))
            .map_err(|error| GenerateError::Syntax {
                template: template_name.to_owned(),
                error,
            })?;
    match settings.get("NAMESPACE") {
        Some(namespace) if settings.is_set_for_cluster("NAMESPACE") => {
            target_namespace::into_namespace(&rendered, namespace).map_err(|error| {
                GenerateError::NotYaml {
                    template: template_name.to_owned(),
                    line: error.line,
                    message: error.message,
                }
            })
        }
        _ => Ok(rendered),
    }
}

/// The variables `template` uses, each at its first use, in order of first use.
pub fn list_variables(
    template: &str,
    template_name: &str,
) -> Result<Vec<TemplateVariable>, GenerateError> {
    Ok(parse(template, template_name)?.variables())
}

/// `clusterctl generate cluster --list-variables` output: required variables, then optional ones with
/// their defaults. Variables set for the cluster (name, namespace, counts, a given version) are optional,
/// showing the value they will get.
pub fn variables_report(variables: &[TemplateVariable], settings: &Settings) -> String {
    let mut required = Vec::new();
    let mut optional = Vec::new();
    for variable in variables {
        let shown = if settings.is_set_for_cluster(&variable.name) {
            settings
                .get(&variable.name)
                .map(|value| format!("{value:?}"))
        } else {
            variable.default.as_ref().map(|default| {
                if default.starts_with('"') {
                    default.clone()
                } else {
                    format!("{default:?}")
                }
            })
        };
        match shown {
            Some(shown) => optional.push((variable.name.as_str(), shown)),
            None => required.push(variable.name.as_str()),
        }
    }
    required.sort_unstable();
    optional.sort_unstable();
    let mut out = String::new();
    if !required.is_empty() {
        out.push_str("Required Variables:\n");
        for name in &required {
            out.push_str(&format!("  - {name}\n"));
        }
    }
    if !optional.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("Optional Variables:\n");
        let width = optional
            .iter()
            .map(|(name, _)| name.len())
            .max()
            .unwrap_or(0);
        for (name, shown) in &optional {
            out.push_str(&format!("  - {name:width$}  (defaults to {shown})\n"));
        }
    }
    out
}

fn parse(template: &str, template_name: &str) -> Result<Template, GenerateError> {
    Template::parse(template).map_err(|error| GenerateError::Syntax {
        template: template_name.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "\
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
  namespace: ${NAMESPACE}
spec:
  replicas: ${CONTROL_PLANE_MACHINE_COUNT}
  infrastructureRef: ${PREFIX}-${CLUSTER_NAME}-control-plane-${CONTROL_PLANE_MACHINE_GEN}
  image: ${IMAGE:=ubuntu-${KUBERNETES_VERSION}}
  flavor: ${FLAVOR}
";

    fn cluster_settings(values: &[(&str, &str)]) -> Settings {
        let mut settings = Settings::new()
            .for_cluster(&ClusterOptions {
                cluster_name: "prod".into(),
                ..ClusterOptions::default()
            })
            .unwrap();
        for (name, value) in values {
            settings.set(name, *value);
        }
        settings
    }

    #[test]
    fn renders_with_every_variable_set() {
        let settings = cluster_settings(&[
            ("PREFIX", "capi"),
            ("CONTROL_PLANE_MACHINE_GEN", "genc01"),
            ("KUBERNETES_VERSION", "v1.33.1"),
            ("FLAVOR", "SCS-2V-4"),
        ]);
        let out = generate(TEMPLATE, "cluster-template.yaml", &settings).unwrap();
        assert!(out.contains("  name: prod-control-plane\n  namespace: default\n"));
        assert!(out.contains("replicas: 1\n"));
        assert!(out.contains("infrastructureRef: capi-prod-control-plane-genc01\n"));
        assert!(out.contains("image: ubuntu-v1.33.1\n"));
    }

    #[test]
    fn every_missing_variable_is_named_with_file_and_line() {
        let error = generate(
            TEMPLATE,
            "templates/cluster-template.yaml",
            &cluster_settings(&[]),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "templates/cluster-template.yaml: no value for 3 required variables; set them in the \
             clusterctl configuration file (--config) or as environment variables:\n  \
             templates/cluster-template.yaml:7: PREFIX\n  \
             templates/cluster-template.yaml:7: CONTROL_PLANE_MACHINE_GEN\n  \
             templates/cluster-template.yaml:9: FLAVOR"
        );
    }

    #[test]
    fn objects_land_in_the_target_namespace() {
        let mut settings = Settings::new()
            .for_cluster(&ClusterOptions {
                cluster_name: "prod".into(),
                target_namespace: Some("team-a".into()),
                ..ClusterOptions::default()
            })
            .unwrap();
        settings.set("X", "1");
        let template =
            "kind: ConfigMap\nmetadata:\n  name: ${CLUSTER_NAME}\ndata:\n  x: \"${X}\"\n";
        assert_eq!(
            generate(template, "t.yaml", &settings).unwrap(),
            "kind: ConfigMap\nmetadata:\n  namespace: team-a\n  name: prod\ndata:\n  x: \"1\"\n"
        );
        // Without a cluster to generate for, the text is only substituted.
        let mut plain = Settings::new();
        plain.set("CLUSTER_NAME", "prod");
        plain.set("X", "1");
        assert!(
            !generate(template, "t.yaml", &plain)
                .unwrap()
                .contains("namespace")
        );
        let error = generate("a: [${X}\n", "t.yaml", &settings).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("t.yaml: line 1 of the rendered output is not YAML: "),
            "{error}"
        );
    }

    #[test]
    fn syntax_errors_name_template_and_line() {
        let error = generate("a: 1\nb: ${B-x}\n", "t.yaml", &Settings::new()).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("t.yaml:2: `${B-…}` is not clusterctl syntax"),
            "{error}"
        );
    }

    #[test]
    fn list_variables_splits_required_and_optional_like_clusterctl() {
        let variables = list_variables(TEMPLATE, "t.yaml").unwrap();
        let report = variables_report(&variables, &cluster_settings(&[]));
        assert_eq!(
            report,
            "\
Required Variables:
  - CONTROL_PLANE_MACHINE_GEN
  - FLAVOR
  - PREFIX

Optional Variables:
  - CLUSTER_NAME                 (defaults to \"prod\")
  - CONTROL_PLANE_MACHINE_COUNT  (defaults to \"1\")
  - IMAGE                        (defaults to \"ubuntu-${KUBERNETES_VERSION}\")
  - NAMESPACE                    (defaults to \"default\")
"
        );
    }
}
