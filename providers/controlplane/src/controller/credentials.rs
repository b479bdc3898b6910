//! The cluster's certificates and the kubeconfig Secret: in place before anything is observed, and the
//! workload cluster's client built from the Secret read here, so a reconcile reads it once.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kubeadm_api::bootstrap::v1beta2::EncryptionAlgorithmType;
use kubeadm_api::cluster::v1beta2::Cluster;
use kubeadm_api::controlplane::events;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;
use kubeadm_cluster::ClusterCertificates;
use kubeadm_cluster::certificates::{self, Generation};
use kubeadm_cluster::workload as kubeconfig_secret;

use super::events::publish;
use super::status::Report;
use super::{Context, Error, owner_reference};
use kubeadm_cluster::kubeconfig;

/// Looks up the cluster certificates, generating the missing ones.
pub(super) async fn certificates(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    report: &mut Report,
) -> Result<ClusterCertificates, Error> {
    let settings = kcp
        .spec
        .kubeadm_config_spec
        .as_ref()
        .map(|s| &s.cluster_configuration);
    let generation = Generation::of(
        settings.unwrap_or(&Default::default()),
        Some(owner_reference(kcp)),
        crate::FIELD_MANAGER,
    );
    let namespace = kcp.namespace().unwrap_or_default();
    let found = certificates::lookup_or_generate_with(
        &ctx.client,
        |name| ctx.secrets.get(&namespace, name),
        &namespace,
        &cluster.name_any(),
        Some(&generation),
    )
    .await;
    match found {
        Ok(certs) => {
            report.certificates(true, "");
            Ok(certs)
        }
        Err(e) => {
            let message = e.to_string();
            report.certificates(false, &message);
            publish(ctx, kcp, &events::CERTIFICATES_UNAVAILABLE, &message).await;
            Err(e.into())
        }
    }
}

/// Creates the kubeconfig Secret, or renews it when its client certificate nears expiry; a Secret this
/// controller does not own (a user's own) is left alone. Returns the workload cluster's client built from
/// the Secret, or why there is none.
pub(super) async fn kubeconfig(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    server: &str,
    ca: &kubeadm_cluster::CertPem,
    through: Option<&str>,
) -> Result<Result<kube::Client, String>, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = kubeconfig_secret::kubeconfig_secret_name(cluster);
    let now = time::OffsetDateTime::now_utc();
    let build = || {
        kubeconfig::secret(
            cluster,
            &namespace,
            server,
            ca,
            owner_reference(kcp),
            key_algorithm(kcp),
            now,
        )
    };
    let existing = match ctx.secrets.get(&namespace, &name) {
        Some(cached) => Some(Secret::clone(&cached)),
        None => secrets.get_opt(&name).await?,
    };
    let secret = match existing {
        None => match secrets.create(&PostParams::default(), &build()?).await {
            Ok(created) => created,
            // Created meanwhile (another replica, a retry): read what is there.
            Err(kube::Error::Api(e)) if e.code == 409 => secrets.get(&name).await?,
            Err(e) => return Err(e.into()),
        },
        Some(existing) => {
            let ours = existing
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == kcp.uid().as_ref());
            if ours && kubeconfig::needs_renewal(&existing, now) {
                let mut secret = build()?;
                secret.metadata.resource_version = existing.resource_version();
                let renewed = secrets
                    .replace(&name, &PostParams::default(), &secret)
                    .await?;
                let note = format!("renewed the client certificate in Secret {name}");
                publish(ctx, kcp, &events::KUBECONFIG_RENEWED, &note).await;
                renewed
            } else {
                existing
            }
        }
    };
    Ok(ctx
        .workload
        .client_for(&secret, &namespace, cluster, through)
        .await
        .map_err(|e| e.to_string()))
}

/// The key algorithm of the cluster's certificates and of the admin kubeconfig's client key.
fn key_algorithm(kcp: &KubeadmControlPlane) -> EncryptionAlgorithmType {
    kcp.spec
        .kubeadm_config_spec
        .as_ref()
        .and_then(|s| s.cluster_configuration.encryption_algorithm)
        .unwrap_or(certificates::DEFAULT_KEY_ALGORITHM)
}
