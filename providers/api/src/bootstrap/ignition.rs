//! Ignition as Cluster API's kubeadm bootstrap provider writes it: spec 2.3.0 (what Flatcar's
//! Ignition and the infrastructure providers that wrap bootstrap data read), and the Container Linux
//! Config of `ignition.containerLinuxConfig.additionalConfig`, transpiled to it and appended.
//!
//! The admission rules and the renderer share this module, so an `additionalConfig` the webhook
//! admits is one the controller can render.

pub mod clc;
pub mod types;

pub use clc::{ClcError, Transpiled, transpile};
pub use types::Config;

use super::v1beta2::{Encoding, KubeadmConfigSpec};

/// The Ignition spec version written.
pub const SPEC_VERSION: &str = "2.3.0";

/// `data:,` and `bytes` percent-encoded, every byte but RFC 2396's unreserved characters escaped,
/// as the Container Linux Config transpiler writes inline contents.
pub fn data_url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(6 + bytes.len() * 3 / 2);
    out.push_str("data:,");
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// File system formats Ignition 2.3 creates.
pub const FILESYSTEM_FORMATS: [&str; 5] = ["ext4", "btrfs", "xfs", "swap", "vfat"];

/// The longest label each format takes.
pub fn label_limit(format: &str) -> usize {
    match format {
        "ext4" => 16,
        "xfs" => 12,
        "vfat" => 11,
        "swap" => 15,
        _ => 256,
    }
}

/// Decodes `encoding: base64` content the way the bootstrap provider writes it into Ignition
/// (whitespace, such as line breaks of a wrapped value, is ignored).
pub fn decode_base64(content: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    let symbols: String = content
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(symbols)
        .map_err(|e| format!("is not valid base64: {e}"))
}

/// What keeps a spec with `format: ignition` from rendering, as `(path below the spec, rule)`
/// pairs: the admission webhooks refuse these, so the controller never meets them.
pub fn spec_problems(spec: &KubeadmConfigSpec) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (i, file) in spec.files.iter().enumerate() {
        if !file.path.starts_with('/') {
            problems.push((
                format!("files[{i}].path"),
                "must be an absolute path with format ignition".to_owned(),
            ));
        }
        if file.defer == Some(true) {
            problems.push((
                format!("files[{i}].defer"),
                "Ignition writes every file before the machine boots further and has no later stage; \
                 write the file from a command (postKubeadmCommands) or use format cloud-config"
                    .to_owned(),
            ));
        }
        if file.encoding == Some(Encoding::Base64)
            && let Some(content) = &file.content
            && let Err(rule) = decode_base64(content)
        {
            problems.push((format!("files[{i}].content"), rule));
        }
    }
    for (i, partition) in spec.disk_setup.partitions.iter().enumerate() {
        if !partition.device.starts_with('/') {
            problems.push((
                format!("diskSetup.partitions[{i}].device"),
                "must be an absolute device path with format ignition".to_owned(),
            ));
        }
    }
    for (i, filesystem) in spec.disk_setup.filesystems.iter().enumerate() {
        let at = format!("diskSetup.filesystems[{i}]");
        if !FILESYSTEM_FORMATS.contains(&filesystem.filesystem.as_str()) {
            problems.push((
                format!("{at}.filesystem"),
                format!(
                    "{:?} is not a format Ignition creates ({})",
                    filesystem.filesystem,
                    FILESYSTEM_FORMATS.join(", ")
                ),
            ));
        }
        if !filesystem.device.starts_with('/') {
            problems.push((
                format!("{at}.device"),
                "must be an absolute device path with format ignition".to_owned(),
            ));
        }
        if let Some(label) = &filesystem.label {
            let limit = label_limit(&filesystem.filesystem);
            if label.chars().count() > limit {
                problems.push((
                    format!("{at}.label"),
                    format!(
                        "is longer than {limit} characters, the limit of {}",
                        filesystem.filesystem
                    ),
                ));
            }
        }
    }
    for (i, mount) in spec.mounts.iter().enumerate() {
        if mount.len() < 2 {
            problems.push((
                format!("mounts[{i}]"),
                "needs at least a device and a mount point".to_owned(),
            ));
        }
    }
    let clc = &spec.ignition.container_linux_config;
    if let Some(text) = clc.additional_config.as_deref()
        && let Err(error) = transpile(text, clc.strict == Some(true))
    {
        problems.push((
            "ignition.containerLinuxConfig.additionalConfig".to_owned(),
            error.to_string(),
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding_and_refuses_garbage() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVs\nbG8h").unwrap(), b"hello!");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("aGVsbG8").is_err());
        assert!(decode_base64("a$==").is_err());
    }

    #[test]
    fn data_urls_escape_all_but_unreserved_characters() {
        assert_eq!(data_url(b"a b/c\n%~()"), "data:,a%20b%2Fc%0A%25~()");
        assert_eq!(data_url("ü".as_bytes()), "data:,%C3%BC");
        assert_eq!(data_url(b""), "data:,");
    }
}
