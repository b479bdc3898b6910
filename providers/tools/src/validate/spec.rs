//! The KubeadmConfigSpec inside one of our objects, read the way the API server would store it: the
//! document is checked like a create request, a v1beta1 object goes through the conversion webhook's
//! code, and the spec is taken from the v1beta2 result. So a v1beta1 object and its v1beta2
//! conversion give the same spec, and a v1beta1-only field lands where Cluster API moves it.

use serde_json::Value;

use kubeadm_api::bootstrap::{self, v1beta2::KubeadmConfigSpec};
use kubeadm_api::conversion::convert_object;
use kubeadm_api::crd::STORAGE_VERSION;

use super::{Header, Problem, Schemas, check_document, is_our_kind};
use crate::yaml;

/// A KubeadmConfigSpec read from a file, with the object it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddedSpec {
    /// Kind of the object (`KubeadmConfig` for a bare spec).
    pub kind: String,
    /// Name of the object, when it has one.
    pub name: Option<String>,
    /// The spec, in v1beta2.
    pub spec: KubeadmConfigSpec,
    /// v1beta1-only fields of the object that the spec does not use.
    pub warnings: Vec<Problem>,
}

/// Where each of our kinds keeps its KubeadmConfigSpec (v1beta2 and v1beta1 alike).
fn spec_path(kind: &str) -> &'static [&'static str] {
    match kind {
        "KubeadmConfig" => &["spec"],
        "KubeadmConfigTemplate" => &["spec", "template", "spec"],
        "KubeadmControlPlane" => &["spec", "kubeadmConfigSpec"],
        _ => &["spec", "template", "spec", "kubeadmConfigSpec"],
    }
}

/// Reads the KubeadmConfigSpec of one document of `yaml`: a KubeadmConfig, KubeadmConfigTemplate,
/// KubeadmControlPlane or KubeadmControlPlaneTemplate of either served version, or a bare spec (a
/// document without `kind`) of `bare_version`. `object` (`Kind/name` or `name`) picks a document
/// when the file has several of our objects. The document must pass the admission rules; every
/// problem is returned with its field path.
pub fn read_embedded_spec(
    file: &str,
    yaml: &str,
    object: Option<&str>,
    bare_version: &str,
) -> Result<EmbeddedSpec, Vec<Problem>> {
    let fail = |document: usize, object: Option<String>, path: Option<String>, rule: String| {
        vec![Problem {
            file: file.to_owned(),
            document,
            object,
            path,
            rule,
        }]
    };
    let mut candidates = Vec::new();
    for yaml::Document {
        number, content, ..
    } in yaml::documents(yaml)
    {
        let value: Value = serde_saphyr::from_str(content)
            .map_err(|e| fail(number, None, None, format!("cannot parse YAML: {e}")))?;
        match Header::of(&value) {
            Some(header) if is_our_kind(&header.group, &header.kind) => {
                candidates.push((number, value, header))
            }
            Some(_) => {}
            None if value.is_object() && value.get("kind").is_none() => {
                let wrapped = serde_json::json!({
                    "apiVersion": format!("{}/{bare_version}", bootstrap::GROUP),
                    "kind": "KubeadmConfig",
                    "metadata": {},
                    "spec": value,
                });
                let header = Header::of(&wrapped).expect("the wrapper has apiVersion and kind");
                candidates.push((number, wrapped, header));
            }
            None => {}
        }
    }
    let matches = |header: &Header| match object {
        None => true,
        Some(wanted) => match wanted.split_once('/') {
            Some((kind, name)) => header.kind == kind && header.name == name,
            None => header.name == wanted,
        },
    };
    let named = |header: &Header| format!("{}/{}", header.kind, header.name);
    let mut chosen: Vec<_> = candidates
        .into_iter()
        .filter(|(_, _, h)| matches(h))
        .collect();
    let (number, value, header) = match chosen.len() {
        1 => chosen.remove(0),
        0 => {
            let rule = match object {
                Some(wanted) => format!("holds no KubeadmConfig(Template) or KubeadmControlPlane(Template) named {wanted:?}"),
                None => "holds no KubeadmConfig(Template), KubeadmControlPlane(Template) or bare KubeadmConfigSpec".into(),
            };
            return Err(fail(0, None, None, rule));
        }
        _ => {
            let names: Vec<String> = chosen.iter().map(|(_, _, h)| named(h)).collect();
            return Err(fail(
                0,
                None,
                None,
                format!(
                    "holds several objects with a KubeadmConfigSpec ({}); pick one by Kind/name",
                    names.join(", ")
                ),
            ));
        }
    };
    let object_name = named(&header);
    let problem = |path: Option<String>, rule: String| Problem {
        file: file.to_owned(),
        document: number,
        object: Some(object_name.clone()),
        path,
        rule,
    };

    // `${VAR}` left in a text field after `generate cluster` is deliberate (`$${COREOS_…_HOSTNAME}`
    // becomes `${COREOS_…_HOSTNAME}`, which the node's envsubst fills in): it is rendered as written.
    let mut unused = Vec::new();
    let problems = check_document(
        value.clone(),
        &header,
        Schemas::shared(),
        &|object, desired| convert_object(object, desired).map_err(|e| e.to_string()),
        &mut unused,
    );
    let warnings = unused
        .into_iter()
        .map(|(path, rule)| problem(Some(path), rule))
        .collect();
    if !problems.is_empty() {
        return Err(problems
            .into_iter()
            .map(|(path, rule)| problem(path, rule))
            .collect());
    }

    let hub = if header.version == STORAGE_VERSION {
        value
    } else {
        convert_object(value, &format!("{}/{STORAGE_VERSION}", header.group)).map_err(|e| {
            vec![problem(
                None,
                format!("cannot convert {}: {e}", header.api_version),
            )]
        })?
    };
    let path = spec_path(&header.kind);
    let spec = path
        .iter()
        .try_fold(&hub, |value, key| value.get(key))
        .filter(|value| !value.is_null())
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let spec: KubeadmConfigSpec = serde_path_to_error::deserialize(spec).map_err(|e| {
        let inner = e.path().to_string();
        let mut at = path.join(".");
        if inner != "." {
            at = format!("{at}.{inner}");
        }
        vec![problem(Some(at), e.into_inner().to_string())]
    })?;
    Ok(EmbeddedSpec {
        kind: header.kind,
        name: Some(header.name).filter(|name| name != "<unnamed>"),
        spec,
        warnings,
    })
}
