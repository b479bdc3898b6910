//! Handlers over a kind's Rust type instead of raw objects: the object is decoded (a failure is a
//! 400 denial, as controller-runtime answers), the handler sees typed values, and the mutated value
//! is encoded back for the patch.
//!
//! Cluster API declares `spec` optional (Go drops an empty one when it writes), while our kinds
//! require it: an object without `spec` (or with `spec: null`) decodes with the spec of the kind's zero
//! value, as Go decodes it (`{}`, or `{template: {}}` for the templates, whose workers' variant Cluster
//! API's own templates declare without spec).

use kube_core::Resource;
use kube_core::admission::Operation;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::admission::{AdmissionRequest, Denial, Warnings};
use crate::{Admission, admission_path};

/// What a validating request asks to do with an object of kind `K`.
#[derive(Debug)]
pub enum Change<'a, K> {
    Create { new: &'a K },
    Update { old: &'a K, new: &'a K },
    Delete { old: &'a K },
}

/// The kubebuilder path of `K`'s webhook of the given kind.
pub(crate) fn path_of<K: Resource<DynamicType = ()>>(admission: Admission) -> String {
    admission_path(&K::group(&()), &K::version(&()), &K::kind(&()), admission)
}

/// A mutating handler that runs `default` on the decoded object of CREATE and UPDATE requests;
/// `default` also sees the request (e.g. whether it is a dry run).
pub(crate) fn defaulting<K, F>(
    default: F,
) -> impl Fn(&AdmissionRequest) -> Result<Option<Value>, Denial> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default,
    F: Fn(&mut K, &AdmissionRequest) -> Result<(), Denial> + Send + Sync + 'static,
{
    move |request| {
        let object = match (&request.operation, &request.object) {
            (Operation::Create | Operation::Update, Some(object)) => object,
            _ => return Ok(None),
        };
        let spec_absent = object.data.get("spec").is_none_or(Value::is_null);
        let mut object: K = decode(object)?;
        default(&mut object, request)?;
        let mut encoded = serde_json::to_value(&object).map_err(|e| {
            Denial::internal(format!("cannot encode the defaulted {}: {e}", K::kind(&())))
        })?;
        // A spec that defaulting left at the zero value stays absent: the patch adds nothing.
        if spec_absent
            && encoded.get("spec") == Some(&kubeadm_api::meta::zero_spec::<K>())
            && let Value::Object(members) = &mut encoded
        {
            members.remove("spec");
        }
        Ok(Some(encoded))
    }
}

/// A validating handler that hands `validate` the decoded new and old objects.
pub(crate) fn validating<K, F>(
    validate: F,
) -> impl Fn(&AdmissionRequest) -> Result<Warnings, Denial> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default,
    F: Fn(Change<'_, K>) -> Result<Warnings, Denial> + Send + Sync + 'static,
{
    move |request| {
        let new: Option<K> = request.object.as_ref().map(decode).transpose()?;
        let old: Option<K> = request.old_object.as_ref().map(decode).transpose()?;
        let missing = |what: &str| {
            Denial::bad_request(format!(
                "the {:?} request for {} carries no {what}",
                request.operation,
                K::kind(&())
            ))
        };
        match request.operation {
            Operation::Create => validate(Change::Create {
                new: new.as_ref().ok_or_else(|| missing("object"))?,
            }),
            Operation::Update => validate(Change::Update {
                old: old.as_ref().ok_or_else(|| missing("oldObject"))?,
                new: new.as_ref().ok_or_else(|| missing("object"))?,
            }),
            Operation::Delete => validate(Change::Delete {
                old: old.as_ref().ok_or_else(|| missing("oldObject"))?,
            }),
            Operation::Connect => Ok(Vec::new()),
        }
    }
}

/// Decodes `object` as a `K`, reading a missing or null `spec` as the zero value's.
pub(crate) fn decode<K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Default>(
    object: &kube_core::DynamicObject,
) -> Result<K, Denial> {
    let bad = |e: serde_json::Error| {
        Denial::bad_request(format!("cannot decode the {}: {e}", K::kind(&())))
    };
    let mut value = serde_json::to_value(object).map_err(bad)?;
    if let Value::Object(members) = &mut value {
        let spec = members.entry("spec").or_insert(Value::Null);
        if spec.is_null() {
            *spec = kubeadm_api::meta::zero_spec::<K>();
        }
    }
    serde_json::from_value(value).map_err(bad)
}

#[cfg(test)]
mod tests {
    use kubeadm_api::bootstrap::v1beta2::KubeadmConfig;
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> kube_core::DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_missing_or_null_spec_decodes_as_empty() {
        for spec in [None, Some(Value::Null)] {
            let mut value = json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmConfig",
                "metadata": {"name": "c", "namespace": "default"}
            });
            if let Some(spec) = spec {
                value["spec"] = spec;
            }
            let config: KubeadmConfig = decode(&object(value)).unwrap();
            assert_eq!(config.spec, Default::default());
        }
    }

    #[test]
    fn a_template_without_spec_decodes_with_an_empty_template() {
        use kubeadm_api::bootstrap::v1beta2::KubeadmConfigTemplate;
        let value = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "md-0", "namespace": "default"}
        });
        let template: KubeadmConfigTemplate = decode(&object(value)).unwrap();
        assert_eq!(template.spec, Default::default());
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_a_bad_request() {
        let value = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfig",
            "metadata": {"name": "c"},
            "spec": {"files": "not a list"}
        });
        let denial = decode::<KubeadmConfig>(&object(value)).unwrap_err();
        assert_eq!(denial.code(), 400);
        assert!(
            denial
                .message()
                .starts_with("cannot decode the KubeadmConfig: "),
            "{}",
            denial.message()
        );
    }
}
