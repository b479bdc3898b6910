//! Conversion between the served versions of our four kinds: v1beta1 (the spoke) and v1beta2 (the
//! hub and storage version).
//!
//! Each kind converts field by field in `bootstrap::conversion` and `controlplane::conversion`.
//! What one version cannot hold survives in an annotation, so that a trip to the other version and
//! back returns the object unchanged:
//!
//! - hub → v1beta1: when the v1beta1 object alone would not convert back to the same hub, the whole
//!   hub without its metadata goes to [`CONVERSION_DATA_ANNOTATION`], in the same form Cluster API
//!   writes, so either provider can read what the other wrote.
//! - v1beta1 → hub: data only v1beta1 holds (e.g. `kubernetesVersion` of the kubeadm
//!   ClusterConfiguration, `useExperimentalRetryJoin`, a duration spelled `10m` rather than `10m0s`)
//!   goes to [`V1BETA1_DATA_ANNOTATION`] as guarded edits, so that it is not lost in storage.
//!
//! Both annotations are consumed by the conversion back and replayed only where the object still
//! holds what the conversion produced: a change made meanwhile in the other version wins.
//!
//! [`convert_object`] is the entry point for JSON objects (conversion webhook, offline tools);
//! [`to_hub`] and [`from_hub`] (and the `TryFrom` impls) convert typed objects.

pub mod duration;
mod preserve;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::bootstrap::{v1beta1 as bootstrap_v1beta1, v1beta2 as bootstrap_v1beta2};
use crate::controlplane::{v1beta1 as controlplane_v1beta1, v1beta2 as controlplane_v1beta2};
pub use duration::DurationError;

/// Annotation on a v1beta1 object with its hub (v1beta2) form as JSON, without metadata.
pub const CONVERSION_DATA_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data";

/// Annotation on a v1beta2 object with the v1beta1-only data of the object it was converted from,
/// as a JSON list of guarded edits (`path`, `expect`, `value`) of the v1beta1 spec and status.
pub const V1BETA1_DATA_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data-v1beta1";

/// Why an object could not be converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The object lacks `apiVersion` or `kind`.
    #[error("{field} is missing; a converted object needs apiVersion and kind")]
    MissingTypeField {
        /// `apiVersion` or `kind`.
        field: &'static str,
    },
    /// An apiVersion of the object or of the requested version is not `group/version`.
    #[error("apiVersion {api_version:?} is not of the form group/version")]
    InvalidApiVersion {
        /// The rejected apiVersion.
        api_version: String,
    },
    /// The requested version belongs to another API group.
    #[error("{kind} of {from} cannot become {to}: conversion never changes the API group")]
    GroupMismatch {
        /// Kind of the object.
        kind: String,
        /// apiVersion of the object.
        from: String,
        /// Requested apiVersion.
        to: String,
    },
    /// The kind is not one of ours.
    #[error(
        "{kind} of group {group} is not converted here; only KubeadmConfig, KubeadmConfigTemplate, \
         KubeadmControlPlane and KubeadmControlPlaneTemplate are"
    )]
    UnknownKind {
        /// API group of the object.
        group: String,
        /// Kind of the object.
        kind: String,
    },
    /// The object's or the requested version is not served.
    #[error("{kind} has no version {version}; the served versions are v1beta1 and v1beta2")]
    UnknownVersion {
        /// Kind of the object.
        kind: String,
        /// The version that is not served.
        version: String,
    },
    /// The object does not match the schema of its version.
    #[error("{kind} {path}: {message}")]
    InvalidObject {
        /// Kind of the object.
        kind: String,
        /// Path of the offending field, e.g. `spec.replicas`.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A v1beta1 duration does not parse.
    #[error(
        "{path}: {value:?} is not a duration ({reason}); write it like \"1h2m3s\", \"10m\" or \"500ms\""
    )]
    InvalidDuration {
        /// Path of the field, e.g. `spec.kubeadmConfigSpec.joinConfiguration.discovery.timeout`.
        path: String,
        /// The rejected text.
        value: String,
        /// Why it does not parse.
        reason: DurationError,
    },
    /// A reference's apiVersion is not `group/version` (or `version` of the core group).
    #[error("{path}: apiVersion {value:?} is not of the form group/version")]
    InvalidReferenceApiVersion {
        /// Path of the field.
        path: String,
        /// The rejected apiVersion.
        value: String,
    },
    /// A v1beta2 reference names no version and none is known for its group and kind.
    #[error(
        "{path}: no apiVersion is known for {kind} of group {group}; it is read from the Cluster API \
         contract label of that kind's CRD, so install the CRD (or pass a lookup to the conversion)"
    )]
    UnknownContractVersion {
        /// Path of the reference.
        path: String,
        /// API group of the referenced kind.
        group: String,
        /// Referenced kind.
        kind: String,
    },
    /// A conversion annotation cannot be read.
    #[error("annotation {annotation}: {message}; remove the annotation to convert without it")]
    InvalidAnnotation {
        /// The annotation key.
        annotation: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

/// Looks up the apiVersion to reference a kind with, as v1beta1 references carry a version and
/// v1beta2 references do not. Cluster API reads it from the `cluster.x-k8s.io/<contract>` label of
/// the kind's CRD.
pub trait ContractVersions {
    /// The full apiVersion (`group/version`) for `kind` of `group`, if known.
    fn api_version(&self, group: &str, kind: &str) -> Option<String>;
}

impl<F: Fn(&str, &str) -> Option<String>> ContractVersions for F {
    fn api_version(&self, group: &str, kind: &str) -> Option<String> {
        self(group, kind)
    }
}

/// A lookup that knows no version: references keep the version they were written with.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoContractVersions;

impl ContractVersions for NoContractVersions {
    fn api_version(&self, _group: &str, _kind: &str) -> Option<String> {
        None
    }
}

pub(crate) mod sealed {
    use super::{ContractVersions, ConversionError};

    /// The field-by-field conversion of one kind. It drops what the target cannot hold; the
    /// annotations in [`super`] keep that data.
    pub trait FieldMapping: Sized {
        /// The same kind in the hub version.
        type Hub;

        /// v1beta1 → v1beta2, metadata included.
        fn to_hub_fields(&self) -> Result<Self::Hub, ConversionError>;

        /// v1beta2 → v1beta1, metadata included.
        fn from_hub_fields(hub: &Self::Hub, versions: &dyn ContractVersions) -> Self;

        /// Checks the v1beta1 object once restored data is in place.
        fn finish_from_hub(
            &mut self,
            _hub: &Self::Hub,
            _versions: &dyn ContractVersions,
        ) -> Result<(), ConversionError> {
            Ok(())
        }
    }
}

/// A v1beta1 kind that converts to and from its v1beta2 hub.
pub trait Spoke:
    sealed::FieldMapping<Hub: HubObject>
    + Resource<DynamicType = ()>
    + Serialize
    + DeserializeOwned
    + Default
    + Clone
    + PartialEq
{
}

/// A v1beta2 kind, the conversion hub.
pub trait HubObject:
    Resource<DynamicType = ()> + Serialize + DeserializeOwned + Default + Clone + PartialEq
{
}

impl<T> HubObject for T where
    T: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Default + Clone + PartialEq
{
}

impl<T> Spoke for T where
    T: sealed::FieldMapping<Hub: HubObject>
        + Resource<DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Default
        + Clone
        + PartialEq
{
}

/// Hub type of a spoke.
pub type HubOf<S> = <S as sealed::FieldMapping>::Hub;

/// Converts a v1beta1 object to v1beta2, without a contract version lookup.
pub fn to_hub<S: Spoke>(spoke: S) -> Result<HubOf<S>, ConversionError> {
    to_hub_with(spoke, &NoContractVersions)
}

/// Converts a v1beta2 object to v1beta1, without a contract version lookup: a KubeadmControlPlane
/// whose infrastructure reference was not written through v1beta1 then fails with
/// [`ConversionError::UnknownContractVersion`].
pub fn from_hub<S: Spoke>(hub: HubOf<S>) -> Result<S, ConversionError> {
    from_hub_with(hub, &NoContractVersions)
}

/// Converts a v1beta1 object to v1beta2.
pub fn to_hub_with<S: Spoke>(
    mut spoke: S,
    versions: &dyn ContractVersions,
) -> Result<HubOf<S>, ConversionError> {
    let data = take_annotation(spoke.meta_mut(), CONVERSION_DATA_ANNOTATION);
    let mut hub = spoke.to_hub_fields()?;
    *hub.meta_mut() = spoke.meta().clone();
    let restored = data
        .map(|data| hub_from_data::<S>(&data, &hub))
        .transpose()?;
    if let Some(mut restored) = restored {
        // Replay what the hub held beyond what v1beta1 shows, where v1beta1 still shows the same.
        *restored.meta_mut() = spoke.meta().clone();
        // What v1beta1 shows as Cluster API serves it: a `false` these fields hold is left out there, and
        // only the annotation tells it from unset.
        let baseline =
            as_cluster_api_serves(S::from_hub_fields(&restored, versions)).to_hub_fields()?;
        let edits = preserve::diff(&content(&baseline), &content(&restored));
        hub = apply_edits(&hub, &edits, CONVERSION_DATA_ANNOTATION)?;
    }
    let derived = S::from_hub_fields(&hub, versions);
    let mut edits = preserve::diff(&content(&derived), &content(&spoke));
    // A `false` Cluster API leaves out is no v1beta1 data to keep.
    edits.retain(|edit| !only_go_plain_false(edit));
    remove_annotation(hub.meta_mut(), V1BETA1_DATA_ANNOTATION);
    if !edits.is_empty() {
        let text = serde_json::to_string(&edits).expect("edits serialize");
        set_annotation(hub.meta_mut(), V1BETA1_DATA_ANNOTATION, text);
    }
    Ok(hub)
}

/// Converts a v1beta2 object to v1beta1.
pub fn from_hub_with<S: Spoke>(
    hub: HubOf<S>,
    versions: &dyn ContractVersions,
) -> Result<S, ConversionError> {
    let mut stripped = hub.clone();
    let edits = take_annotation(stripped.meta_mut(), V1BETA1_DATA_ANNOTATION)
        .map(|text| {
            serde_json::from_str::<Vec<preserve::Edit>>(&text).map_err(|e| {
                ConversionError::InvalidAnnotation {
                    annotation: V1BETA1_DATA_ANNOTATION,
                    message: format!("not a list of edits: {e}"),
                }
            })
        })
        .transpose()?;
    let mut spoke = S::from_hub_fields(&stripped, versions);
    *spoke.meta_mut() = stripped.meta().clone();
    if let Some(edits) = edits {
        spoke = apply_edits(&spoke, &edits, V1BETA1_DATA_ANNOTATION)?;
    }
    spoke.finish_from_hub(&stripped, versions)?;
    // Keep the hub when the v1beta1 object alone would not convert back to it.
    if to_hub_with(spoke.clone(), versions)? != hub {
        let mut data = serde_json::to_value(&stripped).expect("objects serialize");
        if let Value::Object(members) = &mut data {
            members.remove("metadata");
        }
        set_annotation(
            spoke.meta_mut(),
            CONVERSION_DATA_ANNOTATION,
            data.to_string(),
        );
    }
    Ok(spoke)
}

/// Fields of the v1beta1 object a v1beta2 `kind` was converted from that v1beta2 has no place for
/// in its KubeadmConfigSpec, read from its [`V1BETA1_DATA_ANNOTATION`]: `(field path, what becomes
/// of it)`, e.g. `useExperimentalRetryJoin`. They are kept for a conversion back but not used,
/// as Cluster API does not use them either; tools and webhooks warn about them.
pub fn unused_v1beta1_fields(
    kind: &str,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<(String, String)> {
    let Some(text) = annotations.and_then(|a| a.get(V1BETA1_DATA_ANNOTATION)) else {
        return Vec::new();
    };
    let Ok(edits) = serde_json::from_str::<Vec<preserve::Edit>>(text) else {
        return Vec::new();
    };
    let root = match kind {
        "KubeadmConfig" => "/spec/",
        "KubeadmConfigTemplate" => "/spec/template/spec/",
        "KubeadmControlPlane" => "/spec/kubeadmConfigSpec/",
        _ => "/spec/template/spec/kubeadmConfigSpec/",
    };
    edits
        .into_iter()
        // A changed spelling has an `expect`; a member re-created empty holds no data itself.
        .filter(|edit| edit.expect.is_none() && edit.path.starts_with(root))
        .filter(|edit| !matches!(&edit.value, Some(Value::Object(m)) if m.is_empty()))
        .map(|edit| {
            let path = edit.path[1..]
                .split('/')
                .map(|p| p.replace("~1", "/").replace("~0", "~"))
                .collect::<Vec<_>>()
                .join(".");
            let instead = if path.ends_with("clusterConfiguration.networking")
                || path.contains("clusterConfiguration.networking.")
            {
                "the Cluster's spec.clusterNetwork is used instead"
            } else if path.ends_with("clusterConfiguration.kubernetesVersion") {
                "the Machine's version is used instead"
            } else if path.ends_with("clusterConfiguration.clusterName") {
                "the Cluster's name is used instead"
            } else {
                "it has no effect"
            };
            (
                path,
                format!(
                    "exists only in v1beta1 and is not used ({instead}), as in Cluster API; \
                     it is kept for reading the object back as v1beta1"
                ),
            )
        })
        .collect()
}

/// Converts a JSON object of one of our kinds to `desired_api_version`, without a contract
/// version lookup (see [`convert_object_with`]). An object already in that version is returned
/// unchanged.
pub fn convert_object(object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    convert_object_with(object, desired_api_version, &NoContractVersions)
}

/// Converts a JSON object of one of our kinds to `desired_api_version`, looking up the versions of
/// referenced kinds with `versions` when converting to v1beta1.
pub fn convert_object_with(
    object: Value,
    desired_api_version: &str,
    versions: &dyn ContractVersions,
) -> Result<Value, ConversionError> {
    let type_field = |field: &'static str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(ConversionError::MissingTypeField { field })
    };
    let api_version = type_field("apiVersion")?;
    let kind = type_field("kind")?;
    if api_version == desired_api_version {
        return Ok(object);
    }
    let (group, from) = split_api_version(&api_version)?;
    let (desired_group, to) = split_api_version(desired_api_version)?;
    if group != desired_group {
        return Err(ConversionError::GroupMismatch {
            kind,
            from: api_version,
            to: desired_api_version.to_owned(),
        });
    }
    let direction = match (from, to) {
        ("v1beta1", "v1beta2") => Direction::ToHub,
        ("v1beta2", "v1beta1") => Direction::FromHub,
        _ => {
            let version = if matches!(from, "v1beta1" | "v1beta2") {
                to
            } else {
                from
            };
            return Err(ConversionError::UnknownVersion {
                kind,
                version: version.to_owned(),
            });
        }
    };
    macro_rules! dispatch {
        ($($spoke:ty),*) => {
            $(
                if group == <$spoke>::group(&()) && kind == <$spoke>::kind(&()) {
                    return convert_kind::<$spoke>(object, direction, versions);
                }
            )*
        };
    }
    dispatch!(
        bootstrap_v1beta1::KubeadmConfig,
        bootstrap_v1beta1::KubeadmConfigTemplate,
        controlplane_v1beta1::KubeadmControlPlane,
        controlplane_v1beta1::KubeadmControlPlaneTemplate
    );
    Err(ConversionError::UnknownKind {
        group: group.to_owned(),
        kind,
    })
}

#[derive(Clone, Copy)]
enum Direction {
    ToHub,
    FromHub,
}

fn convert_kind<S: Spoke>(
    object: Value,
    direction: Direction,
    versions: &dyn ContractVersions,
) -> Result<Value, ConversionError> {
    let had_spec = object.get("spec").is_some();
    let mut converted = match direction {
        Direction::ToHub => {
            let spoke: S = typed(object)?;
            serde_json::to_value(to_hub_with(spoke, versions)?)
        }
        Direction::FromHub => {
            let hub: HubOf<S> = typed(object)?;
            serde_json::to_value(from_hub_with::<S>(hub, versions)?)
        }
    }
    .expect("objects serialize");
    // The API server converts partial objects too (for managed fields): add no spec to them.
    if !had_spec && let Value::Object(members) = &mut converted {
        members.remove("spec");
    }
    Ok(converted)
}

fn split_api_version(api_version: &str) -> Result<(&str, &str), ConversionError> {
    match api_version.split_once('/') {
        Some((group, version))
            if !group.is_empty() && !version.is_empty() && !version.contains('/') =>
        {
            Ok((group, version))
        }
        _ => Err(ConversionError::InvalidApiVersion {
            api_version: api_version.to_owned(),
        }),
    }
}

/// Reads an object the way the API server's Go code does: `null` is the zero value, and a missing
/// required field is empty rather than an error (partial objects are converted too).
fn typed<T: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Default>(
    object: Value,
) -> Result<T, ConversionError> {
    let mut value = serde_json::to_value(T::default()).expect("objects serialize");
    merge(&mut value, drop_nulls(object));
    serde_path_to_error::deserialize(value).map_err(|e| ConversionError::InvalidObject {
        kind: T::kind(&()).into_owned(),
        path: e.path().to_string(),
        message: e.into_inner().to_string(),
    })
}

fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

/// The hub in a [`CONVERSION_DATA_ANNOTATION`], whole (what we and Cluster API up to v1.14 write) or only the
/// fields read back (Cluster API v1.15, #14075): list entries found by `path` or `hostPath`, as Cluster API
/// looks them up, and some of their fields. Such lists are lined up with the same lists of `hub` (what the
/// v1beta1 object alone converts to) first: in its order, each entry completed from the entry of `hub` with
/// the same key, entries only one side has taken from `hub`.
fn hub_from_data<S: Spoke>(data: &str, hub: &HubOf<S>) -> Result<HubOf<S>, ConversionError> {
    let invalid = |message: String| ConversionError::InvalidAnnotation {
        annotation: CONVERSION_DATA_ANNOTATION,
        message,
    };
    let mut value: Value =
        serde_json::from_str(data).map_err(|e| invalid(format!("not JSON: {e}")))?;
    line_up_keyed_lists(&mut value, &content(hub));
    typed::<HubOf<S>>(value).map_err(|e| invalid(format!("not a v1beta2 object: {e}")))
}

/// Fields that are `*bool` in v1beta2 and a plain `bool` (left out when false) in Cluster API's v1beta1:
/// `files[].append`, the components' `extraVolumes[].readOnly`, the discovery's
/// `bootstrapToken.unsafeSkipCAVerification`, `file.kubeConfig.cluster.insecureSkipTLSVerify` and
/// `user.exec.provideClusterInfo`, `ignition.containerLinuxConfig.strict`. No other field has these names.
const GO_PLAIN_BOOLS: [&str; 6] = [
    "append",
    "readOnly",
    "unsafeSkipCAVerification",
    "insecureSkipTLSVerify",
    "provideClusterInfo",
    "strict",
];

/// `spoke` without the `false` of [`GO_PLAIN_BOOLS`], as Cluster API's v1beta1 types serialize it.
fn as_cluster_api_serves<S: Spoke>(spoke: S) -> S {
    let value = without_go_plain_false(serde_json::to_value(&spoke).expect("objects serialize"));
    serde_json::from_value(value).unwrap_or(spoke)
}

fn without_go_plain_false(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(members) => {
                members.retain(|name, v| {
                    !(GO_PLAIN_BOOLS.contains(&name.as_str()) && *v == Value::Bool(false))
                });
                members.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

/// Whether an edit only adds or removes a `false` of [`GO_PLAIN_BOOLS`], at its path or inside.
fn only_go_plain_false(edit: &preserve::Edit) -> bool {
    let leaf = edit.path.rsplit('/').next().unwrap_or_default();
    let view = |v: &Option<Value>| match v {
        Some(Value::Bool(false)) if GO_PLAIN_BOOLS.contains(&leaf) => None,
        v => v.clone().map(without_go_plain_false),
    };
    view(&edit.expect) == view(&edit.value)
}

/// Keys Cluster API finds list entries by when it restores them: `files[].path`, `extraVolumes[].hostPath`.
const ENTRY_KEYS: [&str; 2] = ["path", "hostPath"];

fn line_up_keyed_lists(restored: &mut Value, hub: &Value) {
    match (restored, hub) {
        (Value::Object(restored), Value::Object(hub)) => {
            for (name, value) in restored.iter_mut() {
                if let Some(hub_value) = hub.get(name) {
                    line_up_keyed_lists(value, hub_value);
                }
            }
        }
        (Value::Array(restored), Value::Array(hub)) => {
            let Some((key, same_keys)) = ENTRY_KEYS.into_iter().find_map(|key| {
                let (ours, theirs) = (unique_keys(restored, key)?, unique_keys(hub, key)?);
                Some((key, ours == theirs))
            }) else {
                return;
            };
            if same_keys && restored.iter().all(|entry| complete_as(entry, hub, key)) {
                return;
            }
            let mut from_annotation: Vec<Value> = std::mem::take(restored);
            *restored = hub
                .iter()
                .map(|hub_entry| {
                    let at = from_annotation
                        .iter()
                        .position(|entry| entry.get(key) == hub_entry.get(key));
                    let mut entry = hub_entry.clone();
                    if let Some(at) = at {
                        merge(&mut entry, from_annotation.swap_remove(at));
                    }
                    entry
                })
                .collect();
        }
        _ => {}
    }
}

/// The values of `key` in `entries` when every entry is an object with a distinct string there.
fn unique_keys<'a>(entries: &'a [Value], key: &str) -> Option<Vec<&'a str>> {
    let keys: Vec<&str> = entries
        .iter()
        .map(|entry| entry.get(key)?.as_str())
        .collect::<Option<_>>()?;
    let distinct: std::collections::BTreeSet<&str> = keys.iter().copied().collect();
    (distinct.len() == keys.len()).then_some(keys)
}

/// Whether an entry of the annotation names every field the entry of `hub` with its key names: a whole
/// hub's entry, kept as it is (a field it leaves out was unset).
fn complete_as(entry: &Value, hub: &[Value], key: &str) -> bool {
    let Some(fields) = entry.as_object() else {
        return false;
    };
    hub.iter()
        .find(|h| h.get(key) == entry.get(key))
        .and_then(Value::as_object)
        .is_some_and(|twin| twin.keys().all(|name| fields.contains_key(name)))
}

/// The parts of an object a conversion maps: spec and status.
fn content<T: Serialize>(object: &T) -> Value {
    let mut members = match serde_json::to_value(object).expect("objects serialize") {
        Value::Object(members) => members,
        _ => Map::new(),
    };
    let mut content = Map::new();
    for key in ["spec", "status"] {
        if let Some(value) = members.remove(key) {
            content.insert(key.to_owned(), value);
        }
    }
    Value::Object(content)
}

fn apply_edits<T: Serialize + DeserializeOwned>(
    object: &T,
    edits: &[preserve::Edit],
    annotation: &'static str,
) -> Result<T, ConversionError> {
    let invalid = |message: String| ConversionError::InvalidAnnotation {
        annotation,
        message,
    };
    let mut content = content(object);
    preserve::apply(&mut content, edits).map_err(invalid)?;
    let mut whole = serde_json::to_value(object).expect("objects serialize");
    if let (Value::Object(whole), Value::Object(content)) = (&mut whole, content) {
        whole.remove("spec");
        whole.remove("status");
        whole.extend(content);
    }
    serde_path_to_error::deserialize(whole).map_err(|e| {
        invalid(format!(
            "restoring it leaves {} invalid: {}",
            e.path(),
            e.inner()
        ))
    })
}

fn take_annotation(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<String> {
    let annotations = meta.annotations.as_mut()?;
    let value = annotations.remove(key)?;
    if annotations.is_empty() {
        meta.annotations = None;
    }
    // An empty value is what a partial object (managed fields) carries: nothing to restore.
    Some(value).filter(|v| !v.trim().is_empty())
}

fn remove_annotation(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) {
    let _ = take_annotation(meta, key);
}

fn set_annotation(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
    value: String,
) {
    meta.annotations
        .get_or_insert_default()
        .insert(key.to_owned(), value);
}

macro_rules! try_from_impls {
    ($($spoke:ty => $hub:ty),* $(,)?) => {
        $(
            impl TryFrom<$spoke> for $hub {
                type Error = ConversionError;

                fn try_from(spoke: $spoke) -> Result<Self, Self::Error> {
                    to_hub(spoke)
                }
            }

            impl TryFrom<$hub> for $spoke {
                type Error = ConversionError;

                fn try_from(hub: $hub) -> Result<Self, Self::Error> {
                    from_hub(hub)
                }
            }
        )*
    };
}

try_from_impls!(
    bootstrap_v1beta1::KubeadmConfig => bootstrap_v1beta2::KubeadmConfig,
    bootstrap_v1beta1::KubeadmConfigTemplate => bootstrap_v1beta2::KubeadmConfigTemplate,
    controlplane_v1beta1::KubeadmControlPlane => controlplane_v1beta2::KubeadmControlPlane,
    controlplane_v1beta1::KubeadmControlPlaneTemplate => controlplane_v1beta2::KubeadmControlPlaneTemplate,
);

/// Parses a duration field of v1beta1 into whole seconds.
pub(crate) fn seconds(
    value: Option<&String>,
    path: impl FnOnce() -> String,
) -> Result<Option<i32>, ConversionError> {
    value
        .map(|text| {
            duration::to_seconds(text).map_err(|reason| ConversionError::InvalidDuration {
                path: path(),
                value: text.clone(),
                reason,
            })
        })
        .transpose()
}

/// Formats whole seconds of v1beta2 as a v1beta1 duration.
pub(crate) fn to_duration(seconds: Option<i32>) -> Option<String> {
    seconds.map(duration::from_seconds)
}

#[cfg(test)]
pub(crate) mod strategies;

#[cfg(test)]
mod tests;
