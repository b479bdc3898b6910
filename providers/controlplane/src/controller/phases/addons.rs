//! kube-proxy and CoreDNS follow the spec once the control plane is initialized and settled. A failure is
//! an Event and does not hold the rest of the reconcile (etcd maintenance in particular).

use super::Next;

use kubeadm_api::controlplane::events;

use crate::controller::events::publish;
use crate::controller::scope::ControlPlane;
use crate::controller::{Context, Error, addons};

pub(super) async fn reconcile(cp: &ControlPlane<'_>, ctx: &Context) -> Result<Option<Next>, Error> {
    if !cp.initialized {
        return Ok(None);
    }
    let result = match cp.workload() {
        Ok(client) => addons::reconcile(client, cp.kcp, &cp.desired).await,
        Err(e) => Err(e.to_string()),
    };
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
