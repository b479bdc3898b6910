//! The ClusterConfiguration in the workload cluster's `kube-system/kubeadm-config` ConfigMap.
//! `kubeadm join --control-plane` renders the new machine's static pods from it, not from the machine's own
//! configuration file, so before a machine joins, the control plane brings it in line with its spec: the
//! Kubernetes version (and with it the kubeadm API version), the component settings, etcd and the feature
//! gates, as Cluster API's control-plane provider does. What kubeadm itself recorded at init (networking,
//! the endpoint, the cluster name, defaults) stays.

use serde_json::{Map, Value};

/// The ConfigMap and its key.
pub const CONFIG_MAP: &str = "kubeadm-config";
pub const KEY: &str = "ClusterConfiguration";

/// Sections the control plane owns: taken from its spec, or removed when the spec has none.
const OWNED: [&str; 9] = [
    "apiVersion",
    "kind",
    "kubernetesVersion",
    "featureGates",
    "apiServer",
    "controllerManager",
    "scheduler",
    "etcd",
    "certificateValidityPeriod",
];
/// Sections taken from the spec only when it sets them: without them kubeadm's own values stay.
const SET_ONLY: [&str; 3] = ["imageRepository", "dns", "encryptionAlgorithm"];

/// The ConfigMap's new ClusterConfiguration, or `None` when it already matches `desired` (the document
/// the bootstrap renderer writes for the target version).
pub fn updated(current: &str, desired: &str) -> Result<Option<String>, String> {
    let current_doc = mapping(current, "the kubeadm-config ClusterConfiguration")?;
    let desired_doc = mapping(desired, "the desired ClusterConfiguration")?;
    let mut next = current_doc.clone();
    for key in OWNED {
        match desired_doc.get(key) {
            Some(value) => next.insert(key.to_owned(), value.clone()),
            None => next.remove(key),
        };
    }
    for key in SET_ONLY {
        if let Some(value) = desired_doc.get(key) {
            next.insert(key.to_owned(), value.clone());
        }
    }
    if next == current_doc {
        return Ok(None);
    }
    serde_saphyr::to_string(&Value::Object(next))
        .map(Some)
        .map_err(|e| format!("cannot write the ClusterConfiguration: {e}"))
}

fn mapping(yaml: &str, what: &str) -> Result<Map<String, Value>, String> {
    match serde_saphyr::from_str::<Value>(yaml) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(format!("{what} is not a YAML mapping")),
        Err(e) => Err(format!("{what} is not YAML: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM_INIT: &str = "\
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.30.4
clusterName: prod
controlPlaneEndpoint: prod.example:6443
certificatesDir: /etc/kubernetes/pki
imageRepository: registry.k8s.io
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.96.0.0/12
apiServer:
  extraArgs:
    audit-log-maxage: '30'
  timeoutForControlPlane: 4m0s
etcd:
  local:
    dataDir: /var/lib/etcd
dns: {}
featureGates:
  EtcdLearnerMode: true
";

    const DESIRED_V1BETA4: &str = "\
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.31.2
clusterName: prod
apiServer:
  extraArgs:
  - name: audit-log-maxage
    value: '30'
etcd:
  local:
    extraArgs:
    - name: heartbeat-interval
      value: '250'
featureGates:
  EtcdLearnerMode: true
";

    fn parsed(yaml: &str) -> Value {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn an_upgrade_rewrites_what_the_spec_owns_and_keeps_what_kubeadm_recorded() {
        let next = updated(KUBEADM_INIT, DESIRED_V1BETA4).unwrap().unwrap();
        let next = parsed(&next);
        assert_eq!(next["apiVersion"], "kubeadm.k8s.io/v1beta4");
        assert_eq!(next["kubernetesVersion"], "v1.31.2");
        assert_eq!(
            next["apiServer"]["extraArgs"][0]["name"],
            "audit-log-maxage"
        );
        assert!(next["apiServer"].get("timeoutForControlPlane").is_none());
        assert_eq!(
            next["etcd"]["local"]["extraArgs"][0]["name"],
            "heartbeat-interval"
        );
        for kept in [
            "controlPlaneEndpoint",
            "certificatesDir",
            "networking",
            "imageRepository",
        ] {
            assert_eq!(next[kept], parsed(KUBEADM_INIT)[kept], "{kept}");
        }
    }

    #[test]
    fn nothing_to_write_once_in_line_and_gates_the_spec_dropped_are_removed() {
        let next = updated(KUBEADM_INIT, DESIRED_V1BETA4).unwrap().unwrap();
        assert_eq!(updated(&next, DESIRED_V1BETA4).unwrap(), None);
        let without_gates = DESIRED_V1BETA4.replace("featureGates:\n  EtcdLearnerMode: true\n", "");
        let next = parsed(&updated(&next, &without_gates).unwrap().unwrap());
        assert!(next.get("featureGates").is_none());
    }

    #[test]
    fn broken_documents_are_named() {
        let err = updated("- a\n- b\n", DESIRED_V1BETA4).unwrap_err();
        assert!(err.contains("kubeadm-config ClusterConfiguration"), "{err}");
        assert!(
            updated(KUBEADM_INIT, "a: [")
                .unwrap_err()
                .contains("desired")
        );
    }
}
