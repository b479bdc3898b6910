//! The Cluster's control-plane endpoint, as kubeadm and clients are given it.

use kubeadm_api::cluster::v1beta2::Cluster;

/// `host:port` of the Cluster's control-plane endpoint (an IPv6 host in brackets), once both are set, as
/// Cluster API requires them: a port of 0 or an empty host means the infrastructure has not set it yet.
pub fn control_plane_endpoint(cluster: &Cluster) -> Option<String> {
    let endpoint = cluster.spec.control_plane_endpoint.as_ref()?;
    let host = endpoint.host.as_deref().filter(|h| !h.is_empty())?;
    let port = endpoint.port.filter(|p| *p > 0)?;
    Some(if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// `https://host:port` of the Cluster's API server, for kubeconfigs.
pub fn server_url(cluster: &Cluster) -> Option<String> {
    control_plane_endpoint(cluster).map(|endpoint| format!("https://{endpoint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeadm_api::cluster::v1beta2::{ApiEndpoint, ClusterSpec};

    fn cluster(host: &str, port: Option<i32>) -> Cluster {
        Cluster::new(
            "c",
            ClusterSpec {
                control_plane_endpoint: Some(ApiEndpoint {
                    host: Some(host.into()),
                    port,
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn host_and_port_are_both_required_and_ipv6_is_bracketed() {
        assert_eq!(
            control_plane_endpoint(&cluster("10.0.0.1", Some(6443))).as_deref(),
            Some("10.0.0.1:6443")
        );
        assert_eq!(
            server_url(&cluster("fd00::1", Some(443))).as_deref(),
            Some("https://[fd00::1]:443")
        );
        assert_eq!(control_plane_endpoint(&cluster("10.0.0.1", None)), None);
        assert_eq!(control_plane_endpoint(&cluster("10.0.0.1", Some(0))), None);
        assert_eq!(control_plane_endpoint(&cluster("", Some(6443))), None);
    }
}
