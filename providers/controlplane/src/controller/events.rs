//! Events on the KubeadmControlPlane, about one of its Machines when there is one.

use kube::Resource;
use kube::runtime::events::{Event, EventType};
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;

use super::Context;

pub(super) async fn publish(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    publish_about(ctx, kcp, type_, reason, "Reconcile", note, None).await;
}

/// An Event on the control plane, about `machine` when given. Events of one reason, action and machine
/// are aggregated into a series by the recorder, so each machine gets its own.
pub(super) async fn publish_about(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
    machine: Option<&str>,
) {
    let secondary = machine.map(|name| k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("cluster.x-k8s.io/v1beta2".into()),
        kind: Some("Machine".into()),
        name: Some(name.to_owned()),
        namespace: kcp.meta().namespace.clone(),
        ..Default::default()
    });
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: action.into(),
        secondary,
    };
    kubeadm_runtime::events::publish(&ctx.recorder, &kcp.object_ref(&()), event).await;
}
