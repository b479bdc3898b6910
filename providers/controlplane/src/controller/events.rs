//! Events on the KubeadmControlPlane, about one of its Machines when there is one. What each Event is
//! (reason, type, actions) is named once in `kubeadm_api::controlplane::events`.

use kube::Resource;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_api::events::EventReason;

use super::Context;

pub(super) async fn publish(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    event: &EventReason,
    note: &str,
) {
    publish_about(ctx, kcp, event, event.action(), note, None).await;
}

/// An Event on the control plane, about `machine` when given, with `action` (one of the Event's).
/// Events of one reason, action and machine are aggregated into a series by the recorder, so each
/// machine gets its own.
pub(super) async fn publish_about(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    event: &EventReason,
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
    let event = kubeadm_runtime::events::event(event, action, note.to_owned(), secondary);
    kubeadm_runtime::events::publish(&ctx.recorder, &kcp.object_ref(&()), event).await;
}
