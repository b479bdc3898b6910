//! Semantic versions of Kubernetes, etcd and CoreDNS as the validation rules read them: strictly for
//! `spec.version` (which must be valid SemVer 2.0 after its `v`), tolerantly for image tags such as
//! `3.5.21-0` or `v1.11.3`.

use std::cmp::Ordering;
use std::fmt;

/// A semantic version. Ordering and equality look at major, minor and patch only: the rules never
/// let a pre-release or build decide (`v1.31.0-rc.1` counts as `v1.31.0`).
#[derive(Clone, Debug, Eq)]
pub struct Semver {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// Dot-separated pre-release identifiers (after `-`), empty for a release.
    pub pre: Vec<String>,
    /// Dot-separated build identifiers (after `+`).
    pub build: Vec<String>,
}

impl Semver {
    /// A release version without pre-release or build parts.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
            pre: Vec::new(),
            build: Vec::new(),
        }
    }

    /// Parses strict SemVer 2.0 (`1.33.1`, `1.34.0-rc.1+abc`): three numbers without leading zeros,
    /// optional pre-release and build identifiers. No `v` prefix, no surrounding space.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (rest, build) = match s.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (s, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        let numbers: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = numbers.as_slice() else {
            return Err(format!(
                "{s:?} needs exactly three dot-separated numbers (major.minor.patch)"
            ));
        };
        let mut version = Self::new(number(major)?, number(minor)?, number(patch)?);
        if let Some(pre) = pre {
            version.pre = identifiers(pre, "pre-release", true)?;
        }
        if let Some(build) = build {
            version.build = identifiers(build, "build", false)?;
        }
        Ok(version)
    }

    /// Parses leniently, as Cluster API does for versions that were already accepted once: trims
    /// space and a `v` prefix, drops leading zeros, and fills a missing minor or patch with 0.
    pub fn parse_tolerant(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s.splitn(3, '.').map(trim_leading_zeros).collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['-', '+'])) {
                return Err(format!(
                    "{s:?}: a short version cannot carry pre-release or build parts"
                ));
            }
            parts.resize(3, "0".into());
        }
        Self::parse(&parts.join("."))
    }

    /// Parses a container image tag as a version; `_` stands for `+` (tags cannot contain `+`).
    pub fn parse_image_tag(tag: &str) -> Result<Self, String> {
        Self::parse_tolerant(&tag.replace('_', "+"))
    }

    fn triple(&self) -> (u64, u64, u64) {
        (self.major, self.minor, self.patch)
    }
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.triple() == other.triple()
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        self.triple().cmp(&other.triple())
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build.join("."))?;
        }
        Ok(())
    }
}

/// A `major.minor.patch` release, as rendering and rollout decisions compare versions: `Copy`, parsed by
/// [`Semver::parse_tolerant`] (so `v1.31.0-rc.1` counts as `v1.31.0`, and an etcd image tag like
/// `3.5.21-0` reads as 3.5.21), but all three numbers are required: `1.33` names no release.
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

    /// Parses `v1.33.1`, `1.33.1`, `v1.33.1+build.5`, `v1.34.0-rc.1` or `3.5.21-0`; `None` for anything
    /// else.
    pub fn parse(s: &str) -> Option<Self> {
        let release = s.trim().split(['-', '+']).next()?;
        if release.matches('.').count() != 2 {
            return None;
        }
        Semver::parse_tolerant(s).ok().map(|v| Self::from(&v))
    }
}

impl From<&Semver> for KubeVersion {
    fn from(v: &Semver) -> Self {
        Self::new(v.major, v.minor, v.patch)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

fn number(part: &str) -> Result<u64, String> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{part:?} is not a number"));
    }
    if part.len() > 1 && part.starts_with('0') {
        return Err(format!("{part:?} has a leading zero"));
    }
    part.parse().map_err(|_| format!("{part:?} is too large"))
}

fn identifiers(s: &str, what: &str, numeric_without_zeros: bool) -> Result<Vec<String>, String> {
    s.split('.')
        .map(|id| {
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!(
                    "{what} identifier {id:?} must be non-empty [0-9A-Za-z-]"
                ));
            }
            if numeric_without_zeros
                && id.bytes().all(|b| b.is_ascii_digit())
                && id.len() > 1
                && id.starts_with('0')
            {
                return Err(format!("{what} identifier {id:?} has a leading zero"));
            }
            Ok(id.to_owned())
        })
        .collect()
}

fn trim_leading_zeros(part: &str) -> String {
    if part.len() <= 1 || !part.starts_with('0') {
        return part.to_owned();
    }
    let trimmed = part.trim_start_matches('0');
    if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
        trimmed.to_owned()
    } else {
        format!("0{trimmed}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parsing() {
        let v = Semver::parse("1.34.0-rc.1+abc.5").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 34, 0));
        assert_eq!(v.pre, ["rc", "1"]);
        assert_eq!(v.build, ["abc", "5"]);
        assert_eq!(v.to_string(), "1.34.0-rc.1+abc.5");
        for bad in [
            "",
            "1.33",
            "v1.33.1",
            "1.33.1.2",
            "01.33.1",
            "1.33.x",
            "1.33.1-",
            "1.33.1-01",
            "1.33.1+",
            "1.33.1-a..b",
            " 1.33.1",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tolerant_parsing_and_image_tags() {
        assert_eq!(
            Semver::parse_tolerant(" v1.33 ").unwrap(),
            Semver::new(1, 33, 0)
        );
        assert_eq!(
            Semver::parse_tolerant("v1.09.01").unwrap(),
            Semver::new(1, 9, 1)
        );
        assert!(Semver::parse_tolerant("1.33-rc").is_err());
        let etcd = Semver::parse_image_tag("3.5.21-0").unwrap();
        assert_eq!(etcd, Semver::new(3, 5, 21));
        assert_eq!(etcd.pre, ["0"]);
        let coredns = Semver::parse_image_tag("v1.11.3_build.1").unwrap();
        assert_eq!(coredns.build, ["build", "1"]);
        assert!(Semver::parse_image_tag("latest").is_err());
    }

    #[test]
    fn ordering_ignores_pre_release() {
        let v = |s| Semver::parse_tolerant(s).unwrap();
        assert!(v("1.9.0") < v("1.10.0"));
        assert!(v("3.3.17") < v("3.4.0"));
        assert_eq!(v("1.31.0-rc.1"), v("1.31.0"));
    }

    mod kube_version {
        use super::super::KubeVersion;

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
                "", "v", "1.33", "v1", "1.33.1.2", "v1.x.1", "v1..1", "1.33.-1", "latest",
                "vv1.33.1", "1.33.1a", "+1.33.1",
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
}
