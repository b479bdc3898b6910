//! What the simulated kubeadm reads from its configuration: the kubeadm API documents (v1beta3 or v1beta4,
//! one or several per file), cloud-init's jinja variables, and the pod annotations in the patches
//! directory. Pure functions over text.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "{file}: unknown template variable `{{{{ {variable} }}}}` (known: ds.meta_data.local_hostname, ds.meta_data.instance_id)"
    )]
    UnknownVariable { file: String, variable: String },
    #[error("{file}: document {index} is not valid YAML: {reason}")]
    Yaml {
        file: String,
        index: usize,
        reason: String,
    },
    #[error("{file}: no {kind} document")]
    MissingKind { file: String, kind: &'static str },
    #[error("{file}: {field} is missing or empty")]
    MissingField { file: String, field: &'static str },
}

/// Values cloud-init's jinja sees for a node.
#[derive(Clone, Debug)]
pub struct InstanceData {
    pub local_hostname: String,
    pub instance_id: String,
}

/// Replaces `{{ ds.meta_data.* }}` the way cloud-init renders a `## template: jinja` file.
pub fn render_jinja(
    file: &str,
    text: &str,
    instance: &InstanceData,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let variable = after[..end].trim();
        match variable {
            "ds.meta_data.local_hostname" | "v1.local_hostname" => {
                out.push_str(&instance.local_hostname)
            }
            "ds.meta_data.instance_id" | "v1.instance_id" => out.push_str(&instance.instance_id),
            other => {
                return Err(ConfigError::UnknownVariable {
                    file: file.to_owned(),
                    variable: other.to_owned(),
                });
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The kubeadm documents of one file by kind, with the raw text of each.
#[derive(Clone, Debug, Default)]
pub struct KubeadmDocuments {
    pub by_kind: BTreeMap<String, (Value, String)>,
}

pub fn documents(file: &str, text: &str) -> Result<KubeadmDocuments, ConfigError> {
    let mut docs = KubeadmDocuments::default();
    for document in kubeadm_tools::yaml::documents(text) {
        let raw = document.content;
        if raw.trim().is_empty() {
            continue;
        }
        let value: Value = serde_saphyr::from_str(raw).map_err(|e| ConfigError::Yaml {
            file: file.to_owned(),
            index: document.number,
            reason: e.to_string(),
        })?;
        if let Some(kind) = value.get("kind").and_then(Value::as_str) {
            docs.by_kind
                .insert(kind.to_owned(), (value.clone(), raw.to_owned()));
        }
    }
    Ok(docs)
}

impl KubeadmDocuments {
    pub fn get(&self, kind: &str) -> Option<&Value> {
        self.by_kind.get(kind).map(|(v, _)| v)
    }

    pub fn raw(&self, kind: &str) -> Option<&str> {
        self.by_kind.get(kind).map(|(_, raw)| raw.as_str())
    }
}

/// `extraArgs` as flags: a map (v1beta3) or a list of `{name, value}` (v1beta4).
pub fn extra_args(value: Option<&Value>) -> Vec<(String, String)> {
    match value {
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), scalar(v))).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| {
                let name = item.get("name")?.as_str()?.to_owned();
                Some((name, item.get("value").map(scalar).unwrap_or_default()))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a node needs from the ClusterConfiguration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    pub control_plane_endpoint: Option<String>,
    pub cluster_name: Option<String>,
    pub etcd_extra_args: Vec<(String, String)>,
    pub api_server_cert_sans: Vec<String>,
    pub service_subnet: Option<String>,
}

pub fn cluster_facts(cluster_configuration: &Value) -> ClusterFacts {
    let str_at = |p: &str| {
        cluster_configuration
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    ClusterFacts {
        control_plane_endpoint: str_at("/controlPlaneEndpoint"),
        cluster_name: str_at("/clusterName"),
        etcd_extra_args: extra_args(cluster_configuration.pointer("/etcd/local/extraArgs")),
        api_server_cert_sans: cluster_configuration
            .pointer("/apiServer/certSANs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        service_subnet: str_at("/networking/serviceSubnet"),
    }
}

/// What a node needs from its InitConfiguration or JoinConfiguration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub node_name: String,
    pub patches_dir: Option<String>,
    /// Joins as a control-plane node (`controlPlane` is set), or initializes one.
    pub control_plane: bool,
    /// From `discovery.bootstrapToken` (joins only).
    pub token: Option<String>,
    pub api_server_endpoint: Option<String>,
}

pub fn node_facts(
    file: &str,
    docs: &KubeadmDocuments,
    init: bool,
) -> Result<NodeFacts, ConfigError> {
    let kind = if init {
        "InitConfiguration"
    } else {
        "JoinConfiguration"
    };
    let doc = docs.get(kind).ok_or(ConfigError::MissingKind {
        file: file.to_owned(),
        kind,
    })?;
    let node_name = doc
        .pointer("/nodeRegistration/name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(ConfigError::MissingField {
            file: file.to_owned(),
            field: "nodeRegistration.name",
        })?
        .to_owned();
    let str_at = |p: &str| doc.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Ok(NodeFacts {
        node_name,
        patches_dir: str_at("/patches/directory"),
        control_plane: init || doc.get("controlPlane").is_some_and(|c| !c.is_null()),
        token: str_at("/discovery/bootstrapToken/token"),
        api_server_endpoint: str_at("/discovery/bootstrapToken/apiServerEndpoint"),
    })
}

/// The static pod a kubeadm patch file targets, from its name (`<target>[suffix][+type].<ext>`).
pub fn patch_target(file_name: &str) -> Option<&'static str> {
    // Longest first: `kube-apiserver` must not match `kube-apiserver…` of another target.
    [
        "kube-controller-manager",
        "kube-scheduler",
        "kube-apiserver",
        "etcd",
    ]
    .into_iter()
    .find(|t| file_name.starts_with(t))
}

/// Annotations the patches in `dir` put on each static pod, applied in file-name order as kubeadm does.
pub fn patch_annotations(
    files: &BTreeMap<String, String>,
    dir: &str,
) -> Result<BTreeMap<&'static str, BTreeMap<String, String>>, ConfigError> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let mut out: BTreeMap<&'static str, BTreeMap<String, String>> = BTreeMap::new();
    for (path, content) in files {
        let Some(name) = path.strip_prefix(&prefix) else {
            continue;
        };
        let Some(target) = patch_target(name) else {
            continue;
        };
        let value: Value = serde_saphyr::from_str(content).map_err(|e| ConfigError::Yaml {
            file: path.clone(),
            index: 0,
            reason: e.to_string(),
        })?;
        if let Some(annotations) = value
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let entry = out.entry(target).or_default();
            for (k, v) in annotations {
                entry.insert(k.clone(), scalar(v));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance() -> InstanceData {
        InstanceData {
            local_hostname: "cp-1".into(),
            instance_id: "sim-1".into(),
        }
    }

    #[test]
    fn jinja_variables_are_rendered_and_unknown_ones_named() {
        let text =
            "name: \"{{ ds.meta_data.local_hostname }}\"\nid: {{ds.meta_data.instance_id}}\n";
        assert_eq!(
            render_jinja("f", text, &instance()).unwrap(),
            "name: \"cp-1\"\nid: sim-1\n"
        );
        assert_eq!(
            render_jinja("f", "{{ ds.meta_data.region }}", &instance()),
            Err(ConfigError::UnknownVariable {
                file: "f".into(),
                variable: "ds.meta_data.region".into()
            })
        );
    }

    #[test]
    fn extra_args_in_both_api_versions() {
        let v1beta3 = serde_json::json!({ "heartbeat-interval": "250", "x": 1 });
        let v1beta4 = serde_json::json!([{ "name": "heartbeat-interval", "value": "250" }]);
        assert_eq!(
            extra_args(Some(&v1beta3)),
            vec![
                ("heartbeat-interval".into(), "250".into()),
                ("x".into(), "1".into())
            ]
        );
        assert_eq!(
            extra_args(Some(&v1beta4)),
            vec![("heartbeat-interval".into(), "250".into())]
        );
    }

    #[test]
    fn init_and_join_documents() {
        let text = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: 127.1.0.1:6443\netcd:\n  local:\n    extraArgs:\n    - name: election-timeout\n      value: \"2500\"\n---\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-1\npatches:\n  directory: /etc/kubernetes/cluster-api/patches\n";
        let docs = documents("kubeadm.yaml", text).unwrap();
        let facts = cluster_facts(docs.get("ClusterConfiguration").unwrap());
        assert_eq!(
            facts.control_plane_endpoint.as_deref(),
            Some("127.1.0.1:6443")
        );
        assert_eq!(
            facts.etcd_extra_args,
            vec![("election-timeout".into(), "2500".into())]
        );
        let node = node_facts("kubeadm.yaml", &docs, true).unwrap();
        assert_eq!(node.node_name, "cp-1");
        assert!(node.control_plane);
        assert_eq!(
            node_facts("kubeadm.yaml", &docs, false)
                .unwrap_err()
                .to_string(),
            "kubeadm.yaml: no JoinConfiguration document"
        );
        let join = "kind: JoinConfiguration\nnodeRegistration:\n  name: w-1\ndiscovery:\n  bootstrapToken:\n    token: abcdef.0123456789abcdef\n    apiServerEndpoint: 127.1.0.1:6443\n";
        let node = node_facts("j", &documents("j", join).unwrap(), false).unwrap();
        assert!(!node.control_plane);
        assert_eq!(node.token.as_deref(), Some("abcdef.0123456789abcdef"));
    }

    #[test]
    fn patch_annotations_per_component() {
        let files: BTreeMap<String, String> = [
            (
                "/p/etcdzz-cluster-api+strategic.yaml",
                "metadata:\n  annotations:\n    cluster.x-k8s.io/machine: m1\n",
            ),
            (
                "/p/kube-apiserver0+strategic.yaml",
                "metadata:\n  annotations:\n    a: \"1\"\n",
            ),
            (
                "/p/kube-apiserverzz+strategic.yaml",
                "metadata:\n  annotations:\n    a: \"2\"\n",
            ),
            ("/other/etcd.yaml", "metadata:\n  annotations:\n    b: x\n"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let got = patch_annotations(&files, "/p").unwrap();
        assert_eq!(got["etcd"]["cluster.x-k8s.io/machine"], "m1");
        assert_eq!(got["kube-apiserver"]["a"], "2");
        assert_eq!(got.len(), 2);
    }
}
