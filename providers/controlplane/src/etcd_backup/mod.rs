//! Snapshots of stacked etcd in S3-compatible object storage (`spec.etcdBackup`): when they are due
//! (a cron schedule in UTC), what they are called, which to delete (retention), the manifest stored
//! beside each, and the sealed format of encrypted ones ([`sealed`]); [`store`] talks to the store.
//!
//! Each snapshot is two objects in `<prefix>/<namespace>/<cluster>/`: the snapshot,
//! `etcd-<time>.db` (or `etcd-<time>.db.sealed` when encrypted), and then its manifest,
//! `etcd-<time>.json`, written only once the snapshot is stored whole. A snapshot without a manifest
//! is not one: restore never takes it, and retention deletes it.

pub mod sealed;
pub mod store;

use k8s_openapi::jiff::Timestamp;
pub use kubeadm_api::controlplane::etcd_backup::Schedule;
use kubeadm_api::controlplane::etcd_backup::{DEFAULT_RETENTION, EtcdBackup};
use serde::{Deserialize, Serialize};

/// What a manifest's `format` says.
pub const MANIFEST_FORMAT: &str = "kubeadm-providers.etcd-snapshot/v1";

/// How many snapshots `backup` keeps.
pub fn retention(backup: &EtcdBackup) -> usize {
    usize::try_from(backup.retention.unwrap_or(DEFAULT_RETENTION))
        .unwrap_or(1)
        .max(1)
}

/// The folder of a cluster's snapshots: `<prefix>/<namespace>/<cluster>` (no leading or trailing
/// slash; a prefix's own slashes are kept, empty segments dropped).
pub fn folder(backup: &EtcdBackup, namespace: &str, cluster: &str) -> String {
    backup
        .s3
        .prefix
        .as_deref()
        .unwrap_or("")
        .split('/')
        .chain([namespace, cluster])
        .filter(|segment| !segment.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// The time stamp in a snapshot's names, sortable as text: `20261207T163000Z`.
pub fn stamp(at: Timestamp) -> String {
    at.strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// The names of the snapshot taken at `at` in `folder`: the snapshot object and its manifest.
pub fn names(folder: &str, at: Timestamp, sealed: bool) -> (String, String) {
    let stamp = stamp(at);
    let extension = if sealed { "db.sealed" } else { "db" };
    (
        format!("{folder}/etcd-{stamp}.{extension}"),
        format!("{folder}/etcd-{stamp}.json"),
    )
}

/// What an object of a cluster's folder is, by its name (the file name, without the folder).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part<'a> {
    Snapshot(&'a str),
    Manifest(&'a str),
}

fn part(file: &str) -> Option<Part<'_>> {
    let rest = file.strip_prefix("etcd-")?;
    let (stamp, kind) = rest.split_once('.')?;
    let stamp_like = stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.ends_with('Z')
        && stamp
            .bytes()
            .enumerate()
            .all(|(i, b)| i == 8 || i == 15 || b.is_ascii_digit());
    if !stamp_like {
        return None;
    }
    match kind {
        "db" | "db.sealed" => Some(Part::Snapshot(stamp)),
        "json" => Some(Part::Manifest(stamp)),
        _ => None,
    }
}

/// The manifest's file name of snapshot object `file` (a file name, without the folder); `None` when it
/// is not a snapshot object.
pub fn manifest_of(file: &str) -> Option<String> {
    match part(file)? {
        Part::Snapshot(stamp) => Some(format!("etcd-{stamp}.json")),
        Part::Manifest(_) => None,
    }
}

/// The objects of a cluster's folder (file names, without the folder) to delete so that the newest
/// `keep` complete snapshots remain: every older snapshot and manifest, and every snapshot without a
/// manifest other than `in_flight` (an upload that ended without its manifest). Objects named
/// otherwise are never touched.
pub fn to_prune(files: &[String], keep: usize, in_flight: Option<&str>) -> Vec<String> {
    let mut complete: Vec<&str> = files
        .iter()
        .filter_map(|f| match part(f) {
            Some(Part::Manifest(stamp)) => Some(stamp),
            _ => None,
        })
        .collect();
    complete.sort_unstable();
    complete.dedup();
    let kept: Vec<&str> = complete.iter().rev().take(keep).copied().collect();
    files
        .iter()
        .filter(|f| match part(f) {
            Some(Part::Snapshot(stamp) | Part::Manifest(stamp)) => {
                !kept.contains(&stamp) && Some(stamp) != in_flight
            }
            None => false,
        })
        .cloned()
        .collect()
}

/// The manifest stored beside a snapshot: what it is, where from, and how to check it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// `<namespace>/<cluster>`.
    pub cluster: String,
    /// When it was taken (RFC 3339).
    pub time: String,
    /// The etcd member it was streamed from, and that member's revision then.
    pub member: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The snapshot object's name (in the bucket).
    pub object: String,
    /// The database as etcd streamed it: bytes and SHA-256 (hex).
    pub size: u64,
    pub sha256: String,
    /// The object as stored (sealed, when encrypted): bytes and SHA-256 (hex).
    pub stored_size: u64,
    pub stored_sha256: String,
    /// How it is encrypted, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<ManifestEncryption>,
}

/// The encryption of a sealed snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestEncryption {
    /// [`sealed::ALGORITHM`].
    pub algorithm: String,
    /// The Secret and key the key came from, and the key's fingerprint ([`sealed::fingerprint`]), so
    /// that a rotated key is told apart from a wrong one.
    pub key_secret: String,
    pub key_fingerprint: String,
}

#[cfg(test)]
mod tests;
