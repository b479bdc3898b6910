//! Keeps the machines' objects in line without replacing any: removes what an interrupted creation left
//! behind and propagates the template's labels and annotations in place, as Cluster API does.

use super::Next;

use crate::controller::machines;
use crate::controller::scope::ControlPlane;
use crate::controller::{Context, Error};

pub(super) async fn reconcile(cp: &ControlPlane<'_>, ctx: &Context) -> Result<Option<Next>, Error> {
    machines::clean_leftovers(ctx, cp.kcp, &cp.machines).await?;
    machines::propagate_in_place(ctx, cp.kcp, &cp.desired, &cp.machines).await?;
    Ok(None)
}
