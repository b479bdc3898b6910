//! Cluster API's TLS flags for the webhook server: `--tls-min-version`, `--tls-cipher-suites` and
//! `--tls-curve-preferences` (Cluster API v1.14.2, kubernetes-sigs/cluster-api#14194), with Go's names,
//! so a Deployment written for Cluster API's managers runs ours. The server speaks what rustls does:
//! TLS 1.2 and 1.3, AEAD suites with ECDHE only, X25519, P-256 and P-384; a name outside that is refused
//! at start, naming the flag and what is offered.

use std::sync::Arc;

use rustls::crypto::ring::{cipher_suite, default_provider, kx_group};
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// The flags as given (see `kubeadm_runtime::TlsArgs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// `VersionTLS12` (the default when empty) or `VersionTLS13`.
    pub min_version: String,
    pub cipher_suites: Vec<String>,
    pub curve_preferences: Vec<String>,
}

/// TLS 1.2 suites by Go's names (each with its older alias, as Go's `crypto/tls` accepts both).
fn tls12_suites() -> [(&'static str, &'static str, SupportedCipherSuite); 6] {
    [
        (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "",
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "",
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "",
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "",
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
}

/// TLS 1.3 suites: accepted in the list, as Go accepts them, and always offered (neither Go nor
/// Cluster API lets TLS 1.3's suites be chosen).
const TLS13_SUITES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Key-exchange groups by Go's curve names.
fn curve(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    Some(match name {
        "X25519" => kx_group::X25519,
        "CurveP256" => kx_group::SECP256R1,
        "CurveP384" => kx_group::SECP384R1,
        _ => return None,
    })
}

const CURVES: &str = "X25519, CurveP256, CurveP384";

/// What the flags make of the server's TLS: the provider (suites, groups) and the protocol versions.
pub struct TlsOptions {
    pub provider: Arc<CryptoProvider>,
    pub versions: &'static [&'static SupportedProtocolVersion],
}

impl TlsOptions {
    /// The defaults: TLS 1.2 and 1.3, every suite and group of rustls's ring provider.
    pub fn defaults() -> Self {
        Self::from_flags(&TlsFlags::default()).expect("the defaults are valid")
    }

    /// Reads the flags; an unknown or unsupported name is an error naming the flag and the choices.
    pub fn from_flags(flags: &TlsFlags) -> Result<Self, String> {
        static BOTH: [&SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static TLS13_ONLY: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        let versions: &'static [&'static SupportedProtocolVersion] = match flags
            .min_version
            .as_str()
        {
            "" | "VersionTLS12" => &BOTH,
            "VersionTLS13" => &TLS13_ONLY,
            "VersionTLS10" | "VersionTLS11" => {
                return Err(format!(
                    "--tls-min-version: {} is not supported: this server speaks TLS 1.2 and 1.3 \
                         (VersionTLS12, VersionTLS13)",
                    flags.min_version
                ));
            }
            other => {
                return Err(format!(
                    "--tls-min-version: {other:?} is not a TLS version; use VersionTLS12 or VersionTLS13"
                ));
            }
        };
        let mut provider = default_provider();
        let names: Vec<&str> = flags
            .cipher_suites
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if !names.is_empty() {
            let mut tls12 = Vec::new();
            for name in names {
                if TLS13_SUITES.contains(&name) {
                    continue;
                }
                let Some((_, _, suite)) = tls12_suites()
                    .into_iter()
                    .find(|(go, alias, _)| *go == name || (!alias.is_empty() && *alias == name))
                else {
                    let offered: Vec<&str> = tls12_suites().iter().map(|s| s.0).collect();
                    return Err(format!(
                        "--tls-cipher-suites: {name} is not offered by this server (no CBC, RSA \
                         key-exchange or 3DES suites); TLS 1.2 suites: {}",
                        offered.join(", ")
                    ));
                };
                if !tls12.contains(&suite) {
                    tls12.push(suite);
                }
            }
            // As in Go, a list of TLS 1.3 names only leaves TLS 1.2 without a suite.
            provider
                .cipher_suites
                .retain(|s| s.version() == &rustls::version::TLS13 || tls12.contains(s));
        }
        let curves: Vec<&str> = flags
            .curve_preferences
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if !curves.is_empty() {
            let mut groups = Vec::new();
            for name in curves {
                let Some(group) = curve(name) else {
                    return Err(format!(
                        "--tls-curve-preferences: {name} is not offered by this server; choose among {CURVES}"
                    ));
                };
                if !groups
                    .iter()
                    .any(|g: &&dyn SupportedKxGroup| g.name() == group.name())
                {
                    groups.push(group);
                }
            }
            provider.kx_groups = groups;
        }
        Ok(Self {
            provider: Arc::new(provider),
            versions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(min: &str, suites: &[&str], curves: &[&str]) -> TlsFlags {
        TlsFlags {
            min_version: min.into(),
            cipher_suites: suites.iter().map(|s| (*s).to_owned()).collect(),
            curve_preferences: curves.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn defaults_offer_tls_1_2_and_1_3_with_every_suite_and_group() {
        let d = TlsOptions::defaults();
        assert_eq!(d.versions.len(), 2);
        assert_eq!(
            d.provider.cipher_suites.len(),
            default_provider().cipher_suites.len()
        );
        assert_eq!(
            d.provider.kx_groups.len(),
            default_provider().kx_groups.len()
        );
    }

    #[test]
    fn go_names_choose_versions_suites_and_curves_in_order() {
        let o = TlsOptions::from_flags(&flags(
            "VersionTLS13",
            &[
                "TLS_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            ],
            &["CurveP384", "X25519", "CurveP384"],
        ))
        .unwrap();
        assert_eq!(o.versions.len(), 1);
        let tls12: Vec<_> = o
            .provider
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls12,
            [rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256]
        );
        assert_eq!(
            o.provider
                .cipher_suites
                .iter()
                .filter(|s| s.version() == &rustls::version::TLS13)
                .count(),
            3,
            "TLS 1.3's suites are always offered"
        );
        let groups: Vec<_> = o.provider.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            groups,
            [rustls::NamedGroup::secp384r1, rustls::NamedGroup::X25519]
        );
    }

    #[test]
    fn what_rustls_does_not_speak_is_refused_naming_the_flag() {
        let error = |f: TlsFlags| TlsOptions::from_flags(&f).err().unwrap();
        assert!(
            error(flags("VersionTLS10", &[], &[]))
                .starts_with("--tls-min-version: VersionTLS10 is not supported")
        );
        assert!(error(flags("1.2", &[], &[])).contains("use VersionTLS12 or VersionTLS13"));
        let cbc = error(flags("", &["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"], &[]));
        assert!(
            cbc.starts_with(
                "--tls-cipher-suites: TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA is not offered"
            ) && cbc.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "{cbc}"
        );
        let p521 = error(flags("", &[], &["CurveP521"]));
        assert_eq!(
            p521,
            "--tls-curve-preferences: CurveP521 is not offered by this server; choose among X25519, CurveP256, CurveP384"
        );
        assert!(error(flags("", &[], &["X25519MLKEM768"])).contains("X25519MLKEM768"));
    }
}
