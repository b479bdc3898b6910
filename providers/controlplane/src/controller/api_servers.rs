//! Which API server the workload cluster is reached through. Normally the cluster's endpoint (its load
//! balancer). While a control-plane machine is being deleted, its etcd member is removed before the
//! machine goes, and a load balancer that checks only TCP still sends connections to its kube-apiserver,
//! which then hangs until the call times out. So while a machine leaves, the next reconcile goes
//! straight to the API server of a machine that stays and whose kube-apiserver pod was healthy (its
//! KEP-2506 endpoint); when that fails, or nothing is leaving, back to the cluster's endpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use crate::endpoints::{Component, MachinePods};
use crate::machines::{ControlPlaneMachine, Health};

/// The API server of a machine that stays, while another one is being deleted: `host:port` of the
/// first (by name) machine not being deleted whose kube-apiserver pod is healthy and that did not fail
/// to answer (`failed`).
pub(super) fn choose(
    machines: &[ControlPlaneMachine],
    pods: &BTreeMap<String, MachinePods>,
    failed: &BTreeSet<String>,
) -> Option<String> {
    if !machines.iter().any(|m| m.deleting) {
        return None;
    }
    let mut staying: Vec<&ControlPlaneMachine> = machines.iter().filter(|m| !m.deleting).collect();
    staying.sort_by(|a, b| a.name.cmp(&b.name));
    staying.into_iter().find_map(|m| {
        let pods = pods.get(&m.name)?;
        let healthy = pods.components.get(&Component::ApiServer) == Some(&Health::Healthy);
        let endpoint = pods.api_server_endpoint.as_ref()?;
        (healthy && !failed.contains(endpoint)).then(|| endpoint.clone())
    })
}

/// Per cluster: the API server its next reconcile goes through, when not the cluster's endpoint, and the
/// ones that failed to answer while the current machine leaves (not chosen again until nothing leaves).
#[derive(Default)]
pub(super) struct ApiServers(Mutex<HashMap<(String, String), Pinned>>);

#[derive(Default)]
struct Pinned {
    server: Option<String>,
    failed: BTreeSet<String>,
}

impl ApiServers {
    /// The API server to reach `cluster` through, if the last look chose one.
    pub(super) fn pinned(&self, cluster: &(String, String)) -> Option<String> {
        self.lock().get(cluster).and_then(|p| p.server.clone())
    }

    /// The API servers that failed to answer while the current machine leaves.
    pub(super) fn failed(&self, cluster: &(String, String)) -> BTreeSet<String> {
        self.lock()
            .get(cluster)
            .map(|p| p.failed.clone())
            .unwrap_or_default()
    }

    /// After a look that answered: `server` is what [`choose`] chose for the next one (`None`: the
    /// cluster's endpoint); when nothing leaves (`leaving` false) the failures are forgotten.
    pub(super) fn chose(&self, cluster: (String, String), server: Option<String>, leaving: bool) {
        let mut all = self.lock();
        let pinned = all.entry(cluster.clone()).or_default();
        pinned.server = server;
        if !leaving {
            all.remove(&cluster);
        }
    }

    /// A look through `through` (`None`: the cluster's endpoint) did not answer: the next goes through the
    /// cluster's endpoint, and `through` is not chosen again while the current machine leaves.
    pub(super) fn failed_through(&self, cluster: (String, String), through: Option<&str>) {
        let mut all = self.lock();
        let pinned = all.entry(cluster).or_default();
        pinned.server = None;
        if let Some(server) = through {
            pinned.failed.insert(server.to_owned());
        }
    }

    /// Forgets a cluster that is gone.
    pub(super) fn forget(&self, cluster: &(String, String)) {
        self.lock().remove(cluster);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Pinned>> {
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
        let none = BTreeSet::new();
        assert_eq!(
            choose(&settled, &pods, &none),
            None,
            "nothing leaves: the endpoint"
        );
        let leaving = [machine("a", true), machine("b", false), machine("c", false)];
        assert_eq!(
            choose(&leaving, &pods, &none).as_deref(),
            Some("10.0.0.3:6443"),
            "not the leaving one, not the unhealthy one"
        );
        let failed = BTreeSet::from(["10.0.0.3:6443".to_owned()]);
        assert_eq!(
            choose(&leaving, &pods, &failed),
            None,
            "not one that failed"
        );
        let nothing_healthy = [machine("a", true), machine("b", false)];
        assert_eq!(choose(&nothing_healthy, &pods, &none), None);
    }

    #[test]
    fn a_failed_look_goes_back_to_the_endpoint_and_is_not_chosen_again() {
        let servers = ApiServers::default();
        let key = ("ns".to_owned(), "c".to_owned());
        servers.chose(key.clone(), Some("10.0.0.3:6443".into()), true);
        assert_eq!(servers.pinned(&key).as_deref(), Some("10.0.0.3:6443"));
        servers.failed_through(key.clone(), Some("10.0.0.3:6443"));
        assert_eq!(servers.pinned(&key), None);
        assert!(servers.failed(&key).contains("10.0.0.3:6443"));
        // Still leaving: the failure is remembered; once nothing leaves it is forgotten.
        servers.chose(key.clone(), None, true);
        assert!(servers.failed(&key).contains("10.0.0.3:6443"));
        servers.chose(key.clone(), None, false);
        assert!(servers.failed(&key).is_empty());
        assert_eq!(servers.pinned(&key), None);
    }
}
