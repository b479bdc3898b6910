//! What the workload cluster's static pods say about each control-plane machine (KEP-2506): the API
//! server endpoint and etcd client URLs kubeadm annotates on its pods, which Machine a pod belongs to (the
//! `cluster.x-k8s.io/machine` annotation the bootstrap provider patches in, else the node name), and
//! whether each control-plane component runs. Nothing is read from the `ClusterStatus` that kubeadm used
//! to keep in the `kubeadm-config` ConfigMap; [`without_cluster_status`] removes a leftover one.

use kubeadm_api::controlplane::conditions::machine;
use kubeadm_api::meta::{
    API_SERVER_ENDPOINT_ANNOTATION, ETCD_CLIENT_URLS_ANNOTATION, MACHINE_ANNOTATION,
};
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use crate::machines::Health;

/// The key of the `kubeadm-config` ConfigMap that older kubeadm versions kept endpoints in.
pub const CLUSTER_STATUS_KEY: &str = "ClusterStatus";

/// The label kubeadm puts on its control-plane static pods (in `kube-system`).
pub const CONTROL_PLANE_POD_SELECTOR: &str = "tier=control-plane";

/// The control-plane components kubeadm runs as static pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    ApiServer,
    ControllerManager,
    Scheduler,
    Etcd,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
        Component::Etcd,
    ];

    /// The `component` label kubeadm puts on the pod, which is also the pod name prefix.
    pub fn name(self) -> &'static str {
        match self {
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
            Component::Etcd => "etcd",
        }
    }

    /// The Machine condition Cluster API reports this component's pod health in.
    pub fn condition(self) -> &'static str {
        match self {
            Component::ApiServer => machine::API_SERVER_POD_HEALTHY,
            Component::ControllerManager => machine::CONTROLLER_MANAGER_POD_HEALTHY,
            Component::Scheduler => machine::SCHEDULER_POD_HEALTHY,
            Component::Etcd => machine::ETCD_POD_HEALTHY,
        }
    }

    fn from_label(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == value)
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A control-plane machine as its pods show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachinePods {
    /// `host:port` from the kube-apiserver pod.
    pub api_server_endpoint: Option<String>,
    /// Client URLs from the etcd pod.
    pub etcd_client_urls: Vec<String>,
    /// Health of each component's pod.
    pub components: BTreeMap<Component, Health>,
    /// Health of the machine's etcd member, once etcd was looked at.
    pub member: Option<Health>,
}

/// Identifies a control-plane Machine for matching pods: its name and the name of its Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineRef<'a> {
    pub machine: &'a str,
    pub node: Option<&'a str>,
}

/// Maps the `kube-system` pods to machines. A pod belongs to the Machine its [`MACHINE_ANNOTATION`] names,
/// else to the Machine whose Node it runs on. Machines without a Node get no entry (nothing can run yet);
/// a missing pod of a machine with a Node is unhealthy.
pub fn machine_pods(pods: &[Pod], machines: &[MachineRef<'_>]) -> BTreeMap<String, MachinePods> {
    let mut view: BTreeMap<String, MachinePods> = machines
        .iter()
        .filter(|m| m.node.is_some())
        .map(|m| {
            let missing = Component::ALL.into_iter().map(|c| {
                let pod = format!("{}-{}", c.name(), m.node.unwrap_or_default());
                (c, Health::Unhealthy(format!("pod {pod} is missing")))
            });
            (
                m.machine.to_owned(),
                MachinePods {
                    components: missing.collect(),
                    ..MachinePods::default()
                },
            )
        })
        .collect();
    for pod in pods {
        let meta = &pod.metadata;
        let Some(component) = meta
            .labels
            .as_ref()
            .and_then(|l| l.get("component"))
            .and_then(|c| Component::from_label(c))
        else {
            continue;
        };
        let annotations = meta.annotations.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let owner = annotations
            .get(MACHINE_ANNOTATION)
            .map(String::as_str)
            .filter(|name| machines.iter().any(|m| m.machine == *name))
            .or_else(|| {
                machines
                    .iter()
                    .find(|m| m.node.is_some() && m.node == node)
                    .map(|m| m.machine)
            });
        let Some(entry) = owner.and_then(|name| view.get_mut(name)) else {
            continue;
        };
        entry.components.insert(component, pod_health(pod));
        match component {
            Component::ApiServer => {
                entry.api_server_endpoint =
                    annotations.get(API_SERVER_ENDPOINT_ANNOTATION).cloned();
            }
            Component::Etcd => {
                entry.etcd_client_urls = annotations
                    .get(ETCD_CLIENT_URLS_ANNOTATION)
                    .map(|urls| {
                        urls.split(',')
                            .map(str::trim)
                            .filter(|u| !u.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
            }
            Component::ControllerManager | Component::Scheduler => {}
        }
    }
    view
}

/// Health of one static pod, as Cluster API judges it: running and ready is healthy; anything else says
/// what it is waiting for or why it failed.
pub fn pod_health(pod: &Pod) -> Health {
    let name = pod.metadata.name.as_deref().unwrap_or("pod");
    let Some(status) = &pod.status else {
        return Health::Unknown(format!("pod {name} has no status yet"));
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .next();
    match status.phase.as_deref() {
        Some("Running") if ready => Health::Healthy,
        Some("Running") => Health::Unhealthy(match waiting {
            Some(reason) => format!("pod {name} is not ready: {reason}"),
            None => format!("pod {name} is running but not ready"),
        }),
        Some("Pending") => Health::Unhealthy(format!(
            "pod {name} is waiting to start{}",
            waiting.map(|r| format!(": {r}")).unwrap_or_default()
        )),
        Some("Failed") => Health::Unhealthy(format!("pod {name} failed")),
        Some("Succeeded") => Health::Unhealthy(format!("pod {name} exited")),
        _ => Health::Unknown(format!("pod {name} is in an unknown phase")),
    }
}

/// The health of a machine's control-plane components other than etcd, as one value: the first problem
/// found, else healthy.
pub fn components_health(pods: &MachinePods) -> Health {
    [
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ]
    .iter()
    .filter_map(|c| pods.components.get(c))
    .find(|h| h.problem().is_some())
    .cloned()
    .unwrap_or(Health::Healthy)
}

/// The `kubeadm-config` data without a leftover `ClusterStatus`; `None` when there is none to remove.
pub fn without_cluster_status(data: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if !data.contains_key(CLUSTER_STATUS_KEY) {
        return None;
    }
    let mut data = data.clone();
    data.remove(CLUSTER_STATUS_KEY);
    Some(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodCondition, PodSpec, PodStatus,
    };
    use kube::api::ObjectMeta;

    fn pod(component: &str, node: &str, machine: Option<&str>, phase: &str, ready: bool) -> Pod {
        let mut annotations = BTreeMap::new();
        if let Some(machine) = machine {
            annotations.insert(MACHINE_ANNOTATION.to_owned(), machine.to_owned());
        }
        match component {
            "kube-apiserver" => {
                annotations.insert(
                    API_SERVER_ENDPOINT_ANNOTATION.into(),
                    format!("{node}.example:6443"),
                );
            }
            "etcd" => {
                annotations.insert(
                    ETCD_CLIENT_URLS_ANNOTATION.into(),
                    format!("https://{node}.example:2379, https://10.0.0.1:2379"),
                );
            }
            _ => {}
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{component}-{node}")),
                namespace: Some("kube-system".into()),
                labels: Some([("component".to_owned(), component.to_owned())].into()),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn all_pods(node: &str, machine: Option<&str>) -> Vec<Pod> {
        Component::ALL
            .iter()
            .map(|c| pod(c.name(), node, machine, "Running", true))
            .collect()
    }

    #[test]
    fn endpoints_come_from_kubeadm_annotations_and_pods_map_by_machine_annotation() {
        // The node name does not match: the machine annotation decides.
        let pods = all_pods("ip-10-0-0-1", Some("cp-a"));
        let machines = [MachineRef {
            machine: "cp-a",
            node: Some("renamed-node"),
        }];
        let view = machine_pods(&pods, &machines);
        let a = &view["cp-a"];
        assert_eq!(
            a.api_server_endpoint.as_deref(),
            Some("ip-10-0-0-1.example:6443")
        );
        assert_eq!(
            a.etcd_client_urls,
            ["https://ip-10-0-0-1.example:2379", "https://10.0.0.1:2379"]
        );
        assert!(a.components.values().all(|h| *h == Health::Healthy));
        assert_eq!(components_health(a), Health::Healthy);
    }

    #[test]
    fn without_the_annotation_pods_map_by_node_name() {
        let pods = all_pods("node-b", None);
        let machines = [
            MachineRef {
                machine: "cp-a",
                node: Some("node-a"),
            },
            MachineRef {
                machine: "cp-b",
                node: Some("node-b"),
            },
            MachineRef {
                machine: "cp-c",
                node: None,
            },
        ];
        let view = machine_pods(&pods, &machines);
        assert_eq!(view["cp-b"].components[&Component::Etcd], Health::Healthy);
        assert_eq!(
            view["cp-a"].components[&Component::ApiServer],
            Health::Unhealthy("pod kube-apiserver-node-a is missing".into())
        );
        assert!(!view.contains_key("cp-c"), "no node, nothing to look at");
    }

    #[test]
    fn a_pod_annotated_for_an_unknown_machine_falls_back_to_its_node() {
        let pods = all_pods("node-a", Some("deleted-machine"));
        let machines = [MachineRef {
            machine: "cp-a",
            node: Some("node-a"),
        }];
        assert_eq!(
            components_health(&machine_pods(&pods, &machines)["cp-a"]),
            Health::Healthy
        );
    }

    #[test]
    fn pod_states_say_what_is_wrong() {
        assert_eq!(
            pod_health(&pod("etcd", "n", None, "Running", true)),
            Health::Healthy
        );
        assert_eq!(
            pod_health(&pod("etcd", "n", None, "Running", false)),
            Health::Unhealthy("pod etcd-n is running but not ready".into())
        );
        let mut crashing = pod("kube-apiserver", "n", None, "Running", false);
        crashing.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert_eq!(
            pod_health(&crashing),
            Health::Unhealthy("pod kube-apiserver-n is not ready: CrashLoopBackOff".into())
        );
        assert!(
            matches!(pod_health(&pod("etcd", "n", None, "Pending", false)), Health::Unhealthy(m) if m.contains("waiting to start"))
        );
        let mut unknown = pod("etcd", "n", None, "Running", true);
        unknown.status = None;
        assert!(matches!(pod_health(&unknown), Health::Unknown(_)));
    }

    #[test]
    fn the_first_component_problem_is_the_machine_problem() {
        let mut pods = all_pods("n", Some("cp"));
        pods[2] = pod("kube-scheduler", "n", Some("cp"), "Failed", false);
        let view = machine_pods(
            &pods,
            &[MachineRef {
                machine: "cp",
                node: Some("n"),
            }],
        );
        assert_eq!(
            components_health(&view["cp"]),
            Health::Unhealthy("pod kube-scheduler-n failed".into())
        );
    }

    #[test]
    fn a_leftover_cluster_status_is_removed_and_nothing_else() {
        let data = BTreeMap::from([
            ("ClusterConfiguration".to_owned(), "x".to_owned()),
            (CLUSTER_STATUS_KEY.to_owned(), "apiEndpoints: {}".to_owned()),
        ]);
        let cleaned = without_cluster_status(&data).unwrap();
        assert_eq!(cleaned.keys().collect::<Vec<_>>(), ["ClusterConfiguration"]);
        assert_eq!(without_cluster_status(&cleaned), None);
    }
}
