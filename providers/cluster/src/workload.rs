//! Clients for workload clusters, built from the admin kubeconfig the control-plane provider stores in the
//! management cluster as Secret `<cluster>-kubeconfig` (key `value`).
//!
//! The kubeconfig holds credentials: errors name the Secret and key, never its content. Whoever can write the
//! Secret chooses what the kubeconfig says, so only self-contained kubeconfigs are accepted: no exec or
//! auth-provider plugins and no file paths, which would run commands or read files in this controller.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::connection::Traffic;

/// Key of the kubeconfig Secret that holds the kubeconfig.
pub const KUBECONFIG_KEY: &str = "value";

/// Name of the Secret that holds the workload cluster's admin kubeconfig.
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(
        "kubeconfig Secret {namespace}/{name} of the workload cluster does not exist (yet); \
         the control-plane provider writes it once the control plane is initialised"
    )]
    SecretMissing { namespace: String, name: String },
    #[error("kubeconfig Secret {namespace}/{name} has no key {KUBECONFIG_KEY:?}")]
    KeyMissing { namespace: String, name: String },
    #[error("kubeconfig in Secret {namespace}/{name} key {KUBECONFIG_KEY:?} is unusable: {reason}")]
    Unparseable {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("cannot read kubeconfig Secret {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl WorkloadError {
    /// Short, bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            WorkloadError::SecretMissing { .. } => "workload_kubeconfig_missing",
            WorkloadError::KeyMissing { .. } => "workload_kubeconfig_key_missing",
            WorkloadError::Unparseable { .. } => "workload_kubeconfig_unparseable",
            WorkloadError::Read { .. } => "workload_kubeconfig_read",
        }
    }
}

/// A client for the workload cluster `cluster`, from its kubeconfig Secret in `namespace` (uncached; see
/// [`WorkloadClients`]).
pub async fn client(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<kube::Client, WorkloadError> {
    let secret = read_secret(management, namespace, cluster).await?;
    client_from_secret(&secret, namespace, cluster).await
}

async fn read_secret(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Secret, WorkloadError> {
    let name = kubeconfig_secret_name(cluster);
    let secrets: Api<Secret> = Api::namespaced(management.clone(), namespace);
    secrets
        .get_opt(&name)
        .await
        .map_err(|source| WorkloadError::Read {
            namespace: namespace.to_owned(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| WorkloadError::SecretMissing {
            namespace: namespace.to_owned(),
            name: name.clone(),
        })
}

/// A client for the workload cluster `cluster` from its kubeconfig Secret, already read (callers that cache
/// clients compare the Secret's resourceVersion first).
pub async fn client_from_secret(
    secret: &Secret,
    namespace: &str,
    cluster: &str,
) -> Result<kube::Client, WorkloadError> {
    client_from_secret_at(secret, namespace, cluster, None).await
}

/// [`client_from_secret`], talking to the API server at `server` (`host:port`, e.g. one control-plane
/// machine's, from its kube-apiserver pod) instead of the kubeconfig's (the cluster's endpoint); the
/// server's certificate is checked against the same CA, for the host `server` names.
pub async fn client_from_secret_at(
    secret: &Secret,
    namespace: &str,
    cluster: &str,
    server: Option<&str>,
) -> Result<kube::Client, WorkloadError> {
    client_from_secret_for(secret, namespace, cluster, server, Traffic::Watches).await
}

async fn client_from_secret_for(
    secret: &Secret,
    namespace: &str,
    cluster: &str,
    server: Option<&str>,
    traffic: Traffic,
) -> Result<kube::Client, WorkloadError> {
    let name = kubeconfig_secret_name(cluster);
    let unparseable = |reason: String| WorkloadError::Unparseable {
        namespace: namespace.to_owned(),
        name: name.clone(),
        reason,
    };
    let raw = secret
        .data
        .as_ref()
        .and_then(|data| data.get(KUBECONFIG_KEY))
        .ok_or_else(|| WorkloadError::KeyMissing {
            namespace: namespace.to_owned(),
            name: name.clone(),
        })?;
    let yaml = std::str::from_utf8(&raw.0).map_err(|_| unparseable("not UTF-8".to_owned()))?;
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|e| unparseable(describe(&e)))?;
    check_self_contained(&kubeconfig).map_err(unparseable)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| unparseable(describe(&e)))?;
    if let Some(server) = server {
        config.cluster_url = format!("https://{server}")
            .parse()
            .map_err(|e| unparseable(format!("API server {server}: {e}")))?;
    }
    crate::connection::client_for(config, traffic)
        .map_err(|e| unparseable(format!("cannot build a client: {e}")))
}

/// A client, with the resourceVersion of the kubeconfig Secret it was built from.
type Built = (String, kube::Client);

/// A cluster's clients: through its endpoint, and through single API servers (see
/// [`client_from_secret_at`]) while a machine leaves.
#[derive(Default)]
struct ClusterClients {
    endpoint: Option<Built>,
    through: HashMap<String, Built>,
}

/// Workload clients by (namespace, cluster), each kept with the resourceVersion of the kubeconfig
/// Secret it was built from and rebuilt when the Secret changes: building a client parses the
/// kubeconfig and sets up TLS, which a reconcile should not repeat.
#[derive(Default)]
pub struct WorkloadClients {
    clients: Mutex<HashMap<(String, String), ClusterClients>>,
    traffic: Traffic,
}

impl WorkloadClients {
    /// Clients that carry calls only (no watches): their idle connections are closed rather than kept.
    pub fn for_calls() -> Self {
        Self {
            clients: Mutex::default(),
            traffic: Traffic::Calls,
        }
    }

    /// The client for `cluster`, reading its kubeconfig Secret to see whether the cached one still holds.
    pub async fn get(
        &self,
        management: &kube::Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<kube::Client, WorkloadError> {
        let secret = read_secret(management, namespace, cluster).await?;
        self.client_for(&secret, namespace, cluster, None).await
    }

    /// Like [`get`](Self::get), taking the kubeconfig Secret from `secrets` when the copy has it.
    pub async fn get_cached(
        &self,
        management: &kube::Client,
        secrets: &crate::SecretCache,
        namespace: &str,
        cluster: &str,
    ) -> Result<kube::Client, WorkloadError> {
        match secrets.get(namespace, &kubeconfig_secret_name(cluster)) {
            Some(secret) => self.client_for(&secret, namespace, cluster, None).await,
            None => self.get(management, namespace, cluster).await,
        }
    }

    /// The client for the cluster whose kubeconfig Secret is `secret`, already read; through `server`
    /// (see [`client_from_secret_at`]) when given. A client through one server carries a few calls
    /// while a machine leaves, so its connection is closed when idle, whatever this cache's traffic.
    pub async fn client_for(
        &self,
        secret: &Secret,
        namespace: &str,
        cluster: &str,
        server: Option<&str>,
    ) -> Result<kube::Client, WorkloadError> {
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let key = (namespace.to_owned(), cluster.to_owned());
        let cached = |clients: &ClusterClients| -> Option<kube::Client> {
            let (built, client) = match server {
                None => clients.endpoint.as_ref()?,
                Some(server) => clients.through.get(server)?,
            };
            (*built == version).then(|| client.clone())
        };
        if let Some(client) = self.lock().get(&key).and_then(cached) {
            return Ok(client);
        }
        let traffic = match server {
            None => self.traffic,
            Some(_) => Traffic::Calls,
        };
        let client = client_from_secret_for(secret, namespace, cluster, server, traffic).await?;
        let mut all = self.lock();
        let clients = all.entry(key).or_default();
        let built = (version, client.clone());
        match server {
            None => clients.endpoint = Some(built),
            Some(server) => {
                clients.through.insert(server.to_owned(), built);
            }
        }
        Ok(client)
    }

    /// Drops the clients of a cluster that is gone (or whose connections stopped answering).
    pub fn forget(&self, namespace: &str, cluster: &str) {
        self.lock()
            .remove(&(namespace.to_owned(), cluster.to_owned()));
    }

    /// Drops the clients through single API servers of a cluster reached through its endpoint again (no
    /// machine leaves); kept, each would hold its request queue until the cluster goes, one more with
    /// every rollout that moved the cluster to new machines.
    pub fn forget_through(&self, namespace: &str, cluster: &str) {
        if let Some(clients) = self
            .lock()
            .get_mut(&(namespace.to_owned(), cluster.to_owned()))
        {
            clients.through.clear();
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), ClusterClients>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Refuses kubeconfigs that would make this controller run a command or read a local file.
fn check_self_contained(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let refused = [
            ("exec", user.exec.is_some()),
            ("auth-provider", user.auth_provider.is_some()),
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ];
        if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
            return Err(format!(
                "user {:?} sets {field}; only inline credentials (token, client-certificate-data, \
                 client-key-data) are accepted",
                named.name
            ));
        }
    }
    for named in &kubeconfig.clusters {
        if named
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "cluster {:?} sets certificate-authority (a file); use certificate-authority-data",
                named.name
            ));
        }
    }
    Ok(())
}

/// What is wrong with a kubeconfig, without quoting it: YAML errors can echo the offending text.
fn describe(error: &KubeconfigError) -> String {
    match error {
        KubeconfigError::Parse(parse) => match parse.location() {
            Some(at) => format!(
                "not valid kubeconfig YAML (line {}, column {})",
                at.line(),
                at.column()
            ),
            None => "not valid kubeconfig YAML".to_owned(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_named_after_the_cluster() {
        assert_eq!(kubeconfig_secret_name("prod"), "prod-kubeconfig");
    }

    #[test]
    fn parse_errors_do_not_quote_the_kubeconfig() {
        let leaky = "apiVersion: v1\nusers: client-key-data-SENSITIVE\n";
        let error = Kubeconfig::from_yaml(leaky).unwrap_err();
        let described = describe(&error);
        assert!(!described.contains("SENSITIVE"), "{described}");
        assert!(described.contains("line"), "{described}");
    }

    #[test]
    fn kubeconfigs_that_reach_outside_the_secret_are_refused() {
        let inline = "users:\n- name: admin\n  user:\n    token: abc\n    client-key-data: eA==\n\
                      clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n    \
                      certificate-authority-data: eA==\n";
        check_self_contained(&Kubeconfig::from_yaml(inline).unwrap()).unwrap();

        for (yaml, field) in [
            (
                "users:\n- name: a\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: sh\n",
                "exec",
            ),
            (
                "users:\n- name: a\n  user:\n    tokenFile: /var/run/token\n",
                "tokenFile",
            ),
            (
                "users:\n- name: a\n  user:\n    client-key: /etc/key.pem\n",
                "client-key",
            ),
            (
                "clusters:\n- name: c\n  cluster:\n    server: https://x\n    certificate-authority: /ca.crt\n",
                "certificate-authority",
            ),
        ] {
            let error = check_self_contained(&Kubeconfig::from_yaml(yaml).unwrap()).unwrap_err();
            assert!(error.contains(field), "{error}");
        }
    }

    fn kubeconfig_secret(version: &str) -> Secret {
        let kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                          contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
                          clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    \
                          insecure-skip-tls-verify: true\n\
                          users:\n- name: u\n  user:\n    token: abc\n";
        let mut secret = Secret::default();
        secret.metadata.resource_version = Some(version.to_owned());
        secret.data = Some(
            [(
                KUBECONFIG_KEY.to_owned(),
                k8s_openapi::ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        );
        secret
    }

    #[tokio::test]
    async fn clients_through_single_servers_go_once_nothing_leaves() {
        let cache = WorkloadClients::default();
        let key = ("ns".to_owned(), "prod".to_owned());
        let versions = |cache: &WorkloadClients| {
            let all = cache.lock();
            let clients = all.get(&key)?;
            let mut through: Vec<_> = clients
                .through
                .iter()
                .map(|(server, (version, _))| format!("{server}@{version}"))
                .collect();
            through.sort();
            Some((clients.endpoint.as_ref().map(|(v, _)| v.clone()), through))
        };
        let v1 = kubeconfig_secret("1");
        for server in [None, Some("10.0.0.2:6443"), Some("10.0.0.3:6443"), None] {
            cache.client_for(&v1, "ns", "prod", server).await.unwrap();
        }
        assert_eq!(
            versions(&cache),
            Some((
                Some("1".to_owned()),
                vec!["10.0.0.2:6443@1".to_owned(), "10.0.0.3:6443@1".to_owned()]
            ))
        );
        // A changed Secret rebuilds only the client asked for.
        let v2 = kubeconfig_secret("2");
        cache
            .client_for(&v2, "ns", "prod", Some("10.0.0.3:6443"))
            .await
            .unwrap();
        assert_eq!(
            versions(&cache).unwrap().1,
            vec!["10.0.0.2:6443@1".to_owned(), "10.0.0.3:6443@2".to_owned()]
        );
        cache.forget_through("ns", "prod");
        assert_eq!(versions(&cache), Some((Some("1".to_owned()), Vec::new())));
        cache.forget("ns", "prod");
        assert_eq!(versions(&cache), None);
    }

    #[tokio::test]
    async fn config_errors_name_the_problem() {
        let no_context = Kubeconfig::from_yaml("apiVersion: v1\nkind: Config\n").unwrap();
        let error = kube::Config::from_custom_kubeconfig(no_context, &KubeConfigOptions::default())
            .await
            .unwrap_err();
        assert!(describe(&error).contains("context"), "{}", describe(&error));
    }
}
