//! kubeadm's add-ons after an upgrade: the kube-proxy DaemonSet follows the control plane's Kubernetes
//! version, CoreDNS follows `clusterConfiguration.dns`, as Cluster API's control-plane provider keeps them.
//! Pure decisions over image names; the controller reads and patches the objects.
//!
//! CoreDNS's Corefile is kept as it is. Cluster API rewrites it with CoreDNS's migration tables; here an
//! upgrade from a CoreDNS older than 1.8.0 (whose Corefiles may hold plugins later releases removed) is
//! refused with a message, and every upgrade keeps the previous Corefile as `Corefile-backup`.

use kubeadm_api::meta::SKIP_COREDNS_ANNOTATION;
use std::fmt;

/// Name of the kube-proxy DaemonSet and its container, and of the CoreDNS Deployment, ConfigMap and
/// container in `kube-system`.
pub const KUBE_PROXY: &str = "kube-proxy";
pub const COREDNS: &str = "coredns";
pub const COREFILE_KEY: &str = "Corefile";
pub const COREFILE_BACKUP_KEY: &str = "Corefile-backup";
/// The oldest CoreDNS whose Corefile any later release still reads.
const OLDEST_UPGRADABLE_COREDNS: (u64, u64, u64) = (1, 8, 0);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddonError {
    #[error("image {image:?}: {why}")]
    Image { image: String, why: &'static str },
    #[error(
        "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag: CoreDNS {to} is older than the running {from}; a downgrade is not done"
    )]
    Downgrade { from: String, to: String },
    #[error(
        "CoreDNS {from} predates 1.8.0: its Corefile may use plugins newer releases removed; upgrade CoreDNS to 1.8 or later by hand first, or set the annotation {SKIP_COREDNS_ANNOTATION}"
    )]
    TooOld { from: String },
    #[error("{field}: {value:?} is not a version (vX.Y.Z)")]
    Version { field: &'static str, value: String },
}

/// An image reference split like Cluster API splits it: `repository/name[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub repository: String,
    pub name: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl Image {
    pub fn parse(image: &str) -> Result<Self, AddonError> {
        let bad = |why| AddonError::Image {
            image: image.to_owned(),
            why,
        };
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest.to_owned())),
            None => (image, None),
        };
        let slash = rest.rfind('/');
        let (path, tag) = match rest.rfind(':') {
            Some(colon) if slash.is_none_or(|s| colon > s) => {
                (&rest[..colon], Some(rest[colon + 1..].to_owned()))
            }
            _ => (rest, None),
        };
        if path.is_empty() || tag.as_deref() == Some("") {
            return Err(bad("not an image reference"));
        }
        let (repository, name) = match path.rsplit_once('/') {
            Some((repository, name)) => (repository.to_owned(), name.to_owned()),
            None => (String::new(), path.to_owned()),
        };
        if name.is_empty() {
            return Err(bad("not an image reference"));
        }
        Ok(Image {
            repository,
            name,
            tag,
            digest,
        })
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.repository.is_empty() {
            write!(f, "{}/", self.repository)?;
        }
        f.write_str(&self.name)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// A Kubernetes version as an image tag: characters a tag may not hold (`+`) become `_`.
pub fn version_tag(version: &str) -> String {
    version
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The kube-proxy image for `version`: the running image retagged, in `image_repository` when the
/// ClusterConfiguration sets one.
pub fn kube_proxy_image(
    current: &str,
    version: &str,
    image_repository: Option<&str>,
) -> Result<String, AddonError> {
    let mut image = Image::parse(current)?;
    if image.digest.is_some() {
        return Err(AddonError::Image {
            image: current.to_owned(),
            why: "pinned by digest, so its version cannot be changed",
        });
    }
    image.tag = Some(version_tag(version));
    if let Some(repository) = image_repository.filter(|r| !r.is_empty()) {
        image.repository = repository.trim_end_matches('/').to_owned();
    }
    Ok(image.to_string())
}

/// A CoreDNS image change to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreDnsUpgrade {
    pub from_image: String,
    pub to_image: String,
}

/// The CoreDNS image `clusterConfiguration` asks for, if it differs from the running one: the tag from
/// `dns.imageTag` (else the running tag), the repository from `dns.imageRepository`, else `imageRepository`,
/// else the running one. Never a downgrade, never from a CoreDNS older than 1.8.0.
pub fn coredns_upgrade(
    current: &str,
    dns_image_repository: Option<&str>,
    dns_image_tag: Option<&str>,
    image_repository: Option<&str>,
) -> Result<Option<CoreDnsUpgrade>, AddonError> {
    let running = Image::parse(current)?;
    let Some(from_tag) = running.tag.clone() else {
        return Err(AddonError::Image {
            image: current.to_owned(),
            why: "has no tag, so its version is unknown",
        });
    };
    let to_tag = dns_image_tag
        .filter(|t| !t.is_empty())
        .unwrap_or(&from_tag)
        .to_owned();
    let repository = dns_image_repository
        .or(image_repository)
        .filter(|r| !r.is_empty())
        .map(|r| r.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| running.repository.clone());
    let from = tag_version(&from_tag, "running CoreDNS image tag")?;
    let to = tag_version(
        &to_tag,
        "spec.kubeadmConfigSpec.clusterConfiguration.dns.imageTag",
    )?;
    // From 1.8.0 on the Kubernetes registries publish CoreDNS as coredns/coredns.
    let mut name = running.name.clone();
    if matches!(repository.as_str(), "k8s.gcr.io" | "registry.k8s.io")
        && name == "coredns"
        && to >= (1, 8, 0)
    {
        name = "coredns/coredns".to_owned();
    }
    let target = Image {
        repository,
        name,
        tag: Some(to_tag.clone()),
        digest: None,
    }
    .to_string();
    if target == current {
        return Ok(None);
    }
    if to < from {
        return Err(AddonError::Downgrade {
            from: from_tag,
            to: to_tag,
        });
    }
    if from < OLDEST_UPGRADABLE_COREDNS {
        return Err(AddonError::TooOld { from: from_tag });
    }
    Ok(Some(CoreDnsUpgrade {
        from_image: current.to_owned(),
        to_image: target,
    }))
}

/// `v1.11.3`, `1.11.3` or `1.11.3-eks.1` as (major, minor, patch) (see
/// [`kubeadm_api::version::Semver::parse_image_tag`]).
fn tag_version(tag: &str, field: &'static str) -> Result<(u64, u64, u64), AddonError> {
    let version =
        kubeadm_api::version::Semver::parse_image_tag(tag).map_err(|_| AddonError::Version {
            field,
            value: tag.to_owned(),
        })?;
    Ok((version.major, version.minor, version.patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_split_and_join_like_references() {
        for image in [
            "registry.k8s.io/kube-proxy:v1.32.4",
            "localhost:5000/team/kube-proxy:v1.32.4",
            "kube-proxy",
            "registry.k8s.io/coredns/coredns:v1.11.3",
            "registry.k8s.io/kube-proxy@sha256:abcd",
        ] {
            assert_eq!(Image::parse(image).unwrap().to_string(), image);
        }
        let with_port = Image::parse("localhost:5000/kube-proxy").unwrap();
        assert_eq!(
            (with_port.repository.as_str(), with_port.tag),
            ("localhost:5000", None)
        );
        assert!(Image::parse("registry.k8s.io/kube-proxy:").is_err());
        assert!(Image::parse("registry.k8s.io/").is_err());
    }

    #[test]
    fn kube_proxy_follows_the_version_and_the_repository() {
        assert_eq!(
            kube_proxy_image("registry.k8s.io/kube-proxy:v1.32.4", "v1.33.1", None).unwrap(),
            "registry.k8s.io/kube-proxy:v1.33.1"
        );
        assert_eq!(
            kube_proxy_image(
                "registry.k8s.io/kube-proxy:v1.32.4",
                "v1.33.1+build.2",
                Some("mirror.example/k8s/")
            )
            .unwrap(),
            "mirror.example/k8s/kube-proxy:v1.33.1_build.2"
        );
        let pinned = kube_proxy_image("registry.k8s.io/kube-proxy@sha256:abcd", "v1.33.1", None);
        assert!(pinned.unwrap_err().to_string().contains("digest"));
    }

    #[test]
    fn coredns_moves_only_when_asked_and_only_forward() {
        let running = "registry.k8s.io/coredns/coredns:v1.11.3";
        assert_eq!(coredns_upgrade(running, None, None, None), Ok(None));
        assert_eq!(
            coredns_upgrade(running, None, Some("v1.12.0"), None),
            Ok(Some(CoreDnsUpgrade {
                from_image: running.into(),
                to_image: "registry.k8s.io/coredns/coredns:v1.12.0".into()
            }))
        );
        // A registry change alone moves the image too; like kubeadm, a custom registry holds `coredns`.
        assert_eq!(
            coredns_upgrade(running, None, None, Some("mirror.example"))
                .unwrap()
                .unwrap()
                .to_image,
            "mirror.example/coredns:v1.11.3"
        );
        let down = coredns_upgrade(running, None, Some("v1.10.1"), None).unwrap_err();
        assert!(matches!(down, AddonError::Downgrade { .. }), "{down}");
        assert!(down.to_string().contains("dns.imageTag"));
        let bad = coredns_upgrade(running, None, Some("latest"), None).unwrap_err();
        assert!(bad.to_string().contains("dns.imageTag"), "{bad}");
    }

    #[test]
    fn old_coredns_is_renamed_but_not_upgraded_from_before_1_8() {
        let old = "k8s.gcr.io/coredns:1.7.0";
        let err = coredns_upgrade(old, None, Some("v1.8.6"), Some("registry.k8s.io")).unwrap_err();
        assert_eq!(
            err,
            AddonError::TooOld {
                from: "1.7.0".into()
            }
        );
        assert_eq!(
            coredns_upgrade("k8s.gcr.io/coredns:1.8.0", None, Some("v1.8.6"), None)
                .unwrap()
                .unwrap()
                .to_image,
            "k8s.gcr.io/coredns/coredns:v1.8.6"
        );
    }
}
