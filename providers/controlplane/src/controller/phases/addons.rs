//! kube-proxy and CoreDNS follow the spec once the control plane is initialized and settled. A failure is
//! an Event and does not hold the rest of the reconcile (etcd maintenance in particular). They are
//! looked at again whenever the spec's inputs to them change, the workload control plane changes, or
//! the cluster's watches open again; not on the resyncs of a settled cluster.

use super::Next;

use kubeadm_api::controlplane::events;

use crate::controller::events::publish;
use crate::controller::observe::Source;
use crate::controller::scope::ControlPlane;
use crate::controller::{Context, Error, addons};

pub(super) async fn reconcile(cp: &ControlPlane<'_>, ctx: &Context) -> Result<Option<Next>, Error> {
    if !cp.initialized {
        return Ok(None);
    }
    let inputs = addons::inputs(cp.kcp, &cp.desired);
    if let Source::Kept { addons, .. } = cp.source
        && addons == Some(inputs)
    {
        // Applied while nothing has changed since, neither the spec nor the workload control plane.
        return Ok(None);
    }
    let result = match cp.workload() {
        Ok(client) => addons::reconcile(client, cp.kcp, &cp.desired).await,
        Err(e) => Err(e.to_string()),
    };
    if result.is_ok() {
        let _ = cp.addons_applied.set(inputs);
    }
    match result {
        Ok(changes) => {
            for change in changes {
                tracing::info!("{change}");
                publish(ctx, cp.kcp, &events::ADDON_UPDATED, &change).await;
            }
        }
        Err(e) => {
            tracing::warn!("{e}");
            publish(ctx, cp.kcp, &events::ADDON_UPDATE_FAILED, &e).await;
        }
    }
    Ok(None)
}
