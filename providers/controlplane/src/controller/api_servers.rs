//! Which API server the workload cluster is reached through. Normally the cluster's endpoint (its load
//! balancer). While a control-plane machine is being deleted, its etcd member is removed before the
//! machine goes, and a load balancer that checks only TCP still sends connections to its kube-apiserver,
//! which then hangs until the call times out. So while a machine leaves, the next reconcile goes
//! straight to the API server of a machine that stays and whose kube-apiserver pod was healthy (its
//! KEP-2506 endpoint); when that fails, or nothing is leaving, back to the cluster's endpoint.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use crate::endpoints::{Component, MachinePods};
use crate::machines::{ControlPlaneMachine, Health};

/// The API server of a machine that stays, while another one is being deleted: `host:port` of the
/// first (by name) machine not being deleted whose kube-apiserver pod is healthy.
pub(super) fn choose(
    machines: &[ControlPlaneMachine],
    pods: &BTreeMap<String, MachinePods>,
) -> Option<String> {
    if !machines.iter().any(|m| m.deleting) {
        return None;
    }
    let mut staying: Vec<&ControlPlaneMachine> = machines.iter().filter(|m| !m.deleting).collect();
    staying.sort_by(|a, b| a.name.cmp(&b.name));
    staying.into_iter().find_map(|m| {
        let pods = pods.get(&m.name)?;
        let healthy = pods.components.get(&Component::ApiServer) == Some(&Health::Healthy);
        healthy.then(|| pods.api_server_endpoint.clone()).flatten()
    })
}

/// The API server each cluster's next reconcile goes through, when not the cluster's endpoint.
#[derive(Default)]
pub(super) struct ApiServers(Mutex<HashMap<(String, String), String>>);

impl ApiServers {
    /// The API server to reach `cluster` through, if the last look chose one.
    pub(super) fn pinned(&self, cluster: &(String, String)) -> Option<String> {
        self.lock().get(cluster).cloned()
    }

    /// What the last look chose ([`choose`]), `None` to go through the cluster's endpoint (also when the
    /// look failed).
    pub(super) fn chose(&self, cluster: (String, String), server: Option<String>) {
        match server {
            Some(server) => self.lock().insert(cluster, server),
            None => self.lock().remove(&cluster),
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, deleting: bool) -> ControlPlaneMachine {
        ControlPlaneMachine {
            name: name.to_owned(),
            deleting,
            ..ControlPlaneMachine::default()
        }
    }

    fn pods(endpoint: &str, api_server: Health) -> MachinePods {
        MachinePods {
            api_server_endpoint: Some(endpoint.to_owned()),
            components: BTreeMap::from([(Component::ApiServer, api_server)]),
            ..MachinePods::default()
        }
    }

    #[test]
    fn only_while_a_machine_leaves_and_only_a_healthy_one_that_stays() {
        let pods = BTreeMap::from([
            ("a".to_owned(), pods("10.0.0.1:6443", Health::Healthy)),
            (
                "b".to_owned(),
                pods("10.0.0.2:6443", Health::Unhealthy("crash".into())),
            ),
            ("c".to_owned(), pods("10.0.0.3:6443", Health::Healthy)),
        ]);
        let settled = [
            machine("a", false),
            machine("b", false),
            machine("c", false),
        ];
        assert_eq!(
            choose(&settled, &pods),
            None,
            "nothing leaves: the endpoint"
        );
        let leaving = [machine("a", true), machine("b", false), machine("c", false)];
        assert_eq!(
            choose(&leaving, &pods).as_deref(),
            Some("10.0.0.3:6443"),
            "not the leaving one, not the unhealthy one"
        );
        let nothing_healthy = [machine("a", true), machine("b", false)];
        assert_eq!(choose(&nothing_healthy, &pods), None);
    }

    #[test]
    fn a_failed_look_goes_back_to_the_endpoint() {
        let servers = ApiServers::default();
        let key = ("ns".to_owned(), "c".to_owned());
        servers.chose(key.clone(), Some("10.0.0.3:6443".into()));
        assert_eq!(servers.pinned(&key).as_deref(), Some("10.0.0.3:6443"));
        servers.chose(key.clone(), None);
        assert_eq!(servers.pinned(&key), None);
    }
}
