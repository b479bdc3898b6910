//! `spec.etcdBackup` of a KubeadmControlPlane: scheduled snapshots of the stacked etcd streamed to
//! S3-compatible object storage, with retention and optional client-side encryption. This provider's
//! addition, the same in v1beta1 and v1beta2 (Cluster API's KubeadmControlPlane has no such field; its
//! other fields are untouched).

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validation::FieldError;

/// The schedule when none is given: every 12 hours, as the Cluster API RKE2 provider defaults to.
pub const DEFAULT_SCHEDULE: &str = "0 */12 * * *";
/// How many snapshots are kept when `retention` is not given.
pub const DEFAULT_RETENTION: i32 = 5;
/// The region when none is given (what S3-compatible stores without regions accept).
pub const DEFAULT_REGION: &str = "us-east-1";
/// Keys of the credentials Secret.
pub const ACCESS_KEY_ID_KEY: &str = "accessKeyID";
pub const SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";
pub const SESSION_TOKEN_KEY: &str = "sessionToken";
/// Key of the CA bundle in the CA Secret.
pub const CA_KEY: &str = "ca.crt";

/// Scheduled etcd snapshots to object storage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackup {
    /// When to take a snapshot: a cron expression of five fields (minute, hour, day of month, month,
    /// day of week) in UTC, e.g. `0 */12 * * *` (the default) or `30 2 * * *`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub schedule: Option<String>,
    /// How many snapshots of this cluster to keep in the store: after a snapshot is stored, older ones
    /// beyond this count are deleted. Defaults to 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub retention: Option<i32>,
    /// The S3-compatible object store the snapshots are streamed to.
    pub s3: EtcdBackupS3,
    /// Client-side encryption of each snapshot before it leaves the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<EtcdBackupEncryption>,
}

/// Where in an S3-compatible object store the snapshots go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupS3 {
    /// URL of the S3 API, e.g. `https://s3.eu-central-1.amazonaws.com` or `https://minio.example:9000`.
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: String,
    /// The bucket; it must exist.
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Folder in the bucket. Snapshots go to `<prefix>/<namespace>/<cluster>/etcd-<time>.db`
    /// (without a prefix: `<namespace>/<cluster>/…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub prefix: Option<String>,
    /// Region of the bucket; defaults to `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,
    /// Secret in the control plane's namespace with the keys `accessKeyID` and `secretAccessKey`
    /// (and `sessionToken` for temporary credentials).
    pub credentials_secret: EtcdBackupSecretReference,
    /// Secret in the control plane's namespace whose `ca.crt` holds the CA certificates that sign the
    /// endpoint's certificate, for stores with a private CA; the system's CAs are trusted besides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<EtcdBackupSecretReference>,
    /// Address the bucket as `https://<bucket>.<endpoint host>/` rather than `https://<endpoint>/<bucket>/`
    /// (path style, the default, which every S3-compatible store answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_hosted_style: Option<bool>,
}

/// A Secret in the control plane's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Client-side encryption of snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupEncryption {
    /// Secret in the control plane's namespace holding the 32-byte key (raw, or base64 of it) under
    /// `key`. Each snapshot is encrypted with AES-256 under a key derived from it and a random salt of
    /// the snapshot, and authenticated with HMAC-SHA-256; a snapshot is never restored when its
    /// authentication fails. Keep the key elsewhere too: without it no snapshot can be restored.
    pub key_secret: EtcdBackupKeyReference,
}

/// A key in a Secret of the control plane's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupKeyReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data; defaults to `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

/// A cron schedule of five fields in UTC.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: croner::Cron,
    text: String,
}

impl Schedule {
    /// `text` as five cron fields; an error names the field and why.
    pub fn parse(text: &str) -> Result<Self, String> {
        let fields = text.split_whitespace().count();
        if fields != 5 {
            return Err(format!(
                "spec.etcdBackup.schedule: {text:?} has {fields} fields; a schedule has five \
                 (minute hour day-of-month month day-of-week, in UTC), e.g. \"0 */12 * * *\""
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| {
                format!("spec.etcdBackup.schedule: {text:?} is not a cron schedule: {e}")
            })?;
        Ok(Self {
            cron,
            text: text.to_owned(),
        })
    }

    /// The schedule of `backup` (the default when it names none).
    pub fn of(backup: &EtcdBackup) -> Result<Self, String> {
        Self::parse(backup.schedule.as_deref().unwrap_or(DEFAULT_SCHEDULE))
    }

    /// The first scheduled time after `after`.
    pub fn next_after(&self, after: Timestamp) -> Result<Timestamp, String> {
        let zoned = after.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
        self.cron
            .find_next_occurrence(&zoned, false)
            .map(|next| next.timestamp())
            .map_err(|e| format!("spec.etcdBackup.schedule {:?}: {e}", self.text))
    }

    /// Whether a snapshot is due at `now` when the last was taken (or the clock started) at `last`:
    /// a scheduled time passed since. Without `last` nothing is due: the clock starts first, so a new
    /// control plane is not snapshotted at once.
    pub fn due(&self, last: Option<Timestamp>, now: Timestamp) -> bool {
        last.and_then(|last| self.next_after(last).ok())
            .is_some_and(|next| next <= now)
    }
}

/// What is wrong with `backup` at `path` (`spec.etcdBackup`): each error names the field and the rule.
pub fn errors(backup: &EtcdBackup, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(schedule) = &backup.schedule
        && let Err(why) = Schedule::parse(schedule)
    {
        errors.push(FieldError::invalid(
            format!("{path}.schedule"),
            schedule,
            why.trim_start_matches("spec.etcdBackup.schedule: ")
                .to_owned(),
        ));
    }
    let endpoint = &backup.s3.endpoint;
    let url_like = ["http://", "https://"].iter().any(|scheme| {
        endpoint
            .strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    });
    if !url_like {
        errors.push(FieldError::invalid(
            format!("{path}.s3.endpoint"),
            endpoint,
            "must be an http:// or https:// URL of the S3 API, e.g. https://s3.eu-central-1.amazonaws.com"
                .to_owned(),
        ));
    }
    let bucket = &backup.s3.bucket;
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !bucket_ok {
        errors.push(FieldError::invalid(
            format!("{path}.s3.bucket"),
            bucket,
            "must be an S3 bucket name: 3 to 63 lower-case letters, digits, dots and hyphens, starting \
             and ending with a letter or digit"
                .to_owned(),
        ));
    }
    if let Some(prefix) = &backup.s3.prefix
        && prefix
            .split('/')
            .any(|segment| segment == "." || segment == "..")
    {
        errors.push(FieldError::invalid(
            format!("{path}.s3.prefix"),
            prefix,
            "may not have \".\" or \"..\" segments".to_owned(),
        ));
    }
    errors
}
