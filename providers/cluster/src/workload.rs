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

/// Cache key: namespace, cluster, and the API server when not the kubeconfig's.
type ClientKey = (String, String, Option<String>);

/// Workload clients by (namespace, cluster, API server), each kept with the resourceVersion of the
/// kubeconfig Secret it was built from and rebuilt when the Secret changes: building a client parses the
/// kubeconfig and sets up TLS, which a reconcile should not repeat.
#[derive(Default)]
pub struct WorkloadClients {
    clients: Mutex<HashMap<ClientKey, (String, kube::Client)>>,
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
    /// (see [`client_from_secret_at`]) when given.
    pub async fn client_for(
        &self,
        secret: &Secret,
        namespace: &str,
        cluster: &str,
        server: Option<&str>,
    ) -> Result<kube::Client, WorkloadError> {
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let key = (
            namespace.to_owned(),
            cluster.to_owned(),
            server.map(str::to_owned),
        );
        if let Some((cached, client)) = self.lock().get(&key)
            && *cached == version
        {
            return Ok(client.clone());
        }
        let client =
            client_from_secret_for(secret, namespace, cluster, server, self.traffic).await?;
        self.lock().insert(key, (version, client.clone()));
        Ok(client)
    }

    /// Drops the clients of a cluster that is gone (or whose connections stopped answering).
    pub fn forget(&self, namespace: &str, cluster: &str) {
        self.lock()
            .retain(|(ns, name, _), _| !(ns == namespace && name == cluster));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ClientKey, (String, kube::Client)>> {
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

    #[tokio::test]
    async fn config_errors_name_the_problem() {
        let no_context = Kubeconfig::from_yaml("apiVersion: v1\nkind: Config\n").unwrap();
        let error = kube::Config::from_custom_kubeconfig(no_context, &KubeConfigOptions::default())
            .await
            .unwrap_err();
        assert!(describe(&error).contains("context"), "{}", describe(&error));
    }
}
