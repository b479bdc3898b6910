//! Release versions of Kubernetes and etcd, as far as rendering decisions need them.

use std::fmt;

/// A `major.minor.patch` release. Pre-release and build metadata are dropped when parsing, so
/// `v1.31.0-rc.1` counts as `v1.31.0`: a release candidate already behaves like its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl KubeVersion {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `v1.33.1`, `1.33.1`, `v1.33.1+build.5`, `v1.34.0-rc.1` or an etcd image tag like `3.5.21-0`.
    /// Returns `None` unless there are exactly three numeric parts.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let release = s.split(['-', '+']).next()?;
        let mut parts = release.split('.').map(number);
        let version = Self::new(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(version)
    }
}

fn number(part: &str) -> Option<u64> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_and_etcd_versions() {
        let v1_33_1 = Some(KubeVersion::new(1, 33, 1));
        assert_eq!(KubeVersion::parse("v1.33.1"), v1_33_1);
        assert_eq!(KubeVersion::parse("1.33.1"), v1_33_1);
        assert_eq!(KubeVersion::parse(" v1.33.1 "), v1_33_1);
        assert_eq!(KubeVersion::parse("v1.33.1+build.5"), v1_33_1);
        assert_eq!(
            KubeVersion::parse("v1.34.0-rc.1"),
            Some(KubeVersion::new(1, 34, 0))
        );
        assert_eq!(
            KubeVersion::parse("v1.34.0-alpha.2+abc"),
            Some(KubeVersion::new(1, 34, 0))
        );
        assert_eq!(
            KubeVersion::parse("3.5.21-0"),
            Some(KubeVersion::new(3, 5, 21))
        );
    }

    #[test]
    fn rejects_anything_else() {
        for bad in [
            "", "v", "1.33", "v1", "1.33.1.2", "v1.x.1", "v1..1", "1.33.-1", "latest", "vv1.33.1",
            "1.33.1a", "+1.33.1",
        ] {
            assert_eq!(KubeVersion::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn orders_numerically() {
        let v = |s| KubeVersion::parse(s).unwrap();
        assert!(v("v1.9.0") < v("v1.10.0"));
        assert!(v("v1.30.14") < v("v1.31.0"));
        assert!(v("v1.31.0") < v("v1.31.1"));
        assert!(v("v2.0.0") > v("v1.99.99"));
        assert_eq!(v("v1.31.0-rc.1"), v("v1.31.0"));
        assert_eq!(v("1.31.0").to_string(), "v1.31.0");
    }
}
