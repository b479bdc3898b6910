//! Handlers over a kind's Rust type instead of raw objects: the object is decoded (a failure is a
//! 400 denial, as controller-runtime answers), the handler sees typed values, and the mutated value
//! is encoded back for the patch.

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

/// A mutating handler that runs `default` on the decoded object of CREATE and UPDATE requests.
pub(crate) fn defaulting<K, F>(
    default: F,
) -> impl Fn(&AdmissionRequest) -> Result<Option<Value>, Denial> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Serialize,
    F: Fn(&mut K) -> Result<(), Denial> + Send + Sync + 'static,
{
    move |request| {
        let object = match (&request.operation, &request.object) {
            (Operation::Create | Operation::Update, Some(object)) => object,
            _ => return Ok(None),
        };
        let mut object: K = decode(object)?;
        default(&mut object)?;
        serde_json::to_value(&object).map(Some).map_err(|e| {
            Denial::internal(format!("cannot encode the defaulted {}: {e}", K::kind(&())))
        })
    }
}

/// A validating handler that hands `validate` the decoded new and old objects.
pub(crate) fn validating<K, F>(
    validate: F,
) -> impl Fn(&AdmissionRequest) -> Result<Warnings, Denial> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
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

fn decode<K: Resource<DynamicType = ()> + DeserializeOwned>(
    object: &kube_core::DynamicObject,
) -> Result<K, Denial> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| Denial::bad_request(format!("cannot decode the {}: {e}", K::kind(&()))))
}
