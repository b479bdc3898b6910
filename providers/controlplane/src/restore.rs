//! Restoring stacked etcd from a snapshot the controller took: what the
//! [`ETCD_RESTORE_FROM_ANNOTATION`] asks for, whether it can be done safely, and the next step. Pure: the
//! controller gathers, this decides, the controller does one step per reconcile.
//!
//! The order keeps every step undoable until the old machines go: the snapshot is read, checked and
//! staged in the restore Secret first; only then are the old machines deleted (their etcd is replaced,
//! not shrunk, so their hooks are released without membership changes); once they are gone one machine
//! is created whose bootstrap data restores the snapshot before `kubeadm init` starts etcd; when its
//! member answers, the restore is finished and the control plane grows back through learners as usual.

use std::fmt;
use std::path::{Component, Path, PathBuf};

pub use kubeadm_api::meta::{
    ETCD_RESTORE_DOWNLOAD_KEY, ETCD_RESTORE_FROM_ANNOTATION, ETCD_RESTORE_SECRET_KEY,
    ETCD_RESTORE_SNAPSHOT_ANNOTATION,
};

/// Name of the Secret the snapshot is staged in for the restoring machine's bootstrap data.
pub fn restore_secret_name(cluster: &str) -> String {
    format!("{cluster}-etcd-restore")
}

/// Where the snapshot to restore comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A snapshot Secret in the control plane's namespace (`secret/<name>`).
    Secret(String),
    /// A snapshot file under the manager's snapshot directory (`file:<path>`).
    File(PathBuf),
    /// A snapshot object in the bucket of `spec.etcdBackup` (`s3://<bucket>/<object>`, as
    /// `status.etcd.lastSnapshot` names it).
    Object { bucket: String, key: String },
}

impl Source {
    /// Parses the annotation's value.
    pub fn parse(value: &str) -> Result<Source, Refusal> {
        let value = value.trim();
        let bad = |rule: &str| Refusal::BadSource {
            value: value.to_owned(),
            rule: rule.to_owned(),
        };
        if let Some(name) = value.strip_prefix("secret/") {
            let valid = !name.is_empty()
                && name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            return if valid {
                Ok(Source::Secret(name.to_owned()))
            } else {
                Err(bad(
                    "`secret/<name>` needs the name of a Secret in the control plane's namespace",
                ))
            };
        }
        if let Some(path) = value.strip_prefix("file:") {
            let path = Path::new(path);
            let plain = path.is_absolute()
                && path
                    .components()
                    .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            return if plain {
                Ok(Source::File(path.to_owned()))
            } else {
                Err(bad(
                    "`file:<path>` needs an absolute path without `.` or `..`",
                ))
            };
        }
        if let Some(rest) = value.strip_prefix("s3://") {
            let plain = rest.split_once('/').filter(|(bucket, key)| {
                !bucket.is_empty()
                    && !key.is_empty()
                    && key
                        .split('/')
                        .all(|segment| !matches!(segment, "" | "." | ".."))
            });
            return match plain {
                Some((bucket, key)) => Ok(Source::Object {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                }),
                None => Err(bad(
                    "`s3://<bucket>/<object>` needs a bucket and an object name without empty, `.` or `..` segments",
                )),
            };
        }
        Err(bad(
            "it must be `secret/<name>`, `file:<path>` or `s3://<bucket>/<object>`",
        ))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Secret(name) => write!(f, "secret/{name}"),
            Source::File(path) => write!(f, "file:{}", path.display()),
            Source::Object { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

/// Why a restore is not done. Each names the annotation and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: etcd is external \
         (spec.kubeadmConfigSpec.clusterConfiguration.etcd.external); restore it with its own tools"
    )]
    ExternalEtcd,
    #[error("annotation {ETCD_RESTORE_FROM_ANNOTATION}={value:?}: {rule}")]
    BadSource { value: String, rule: String },
    #[error("annotation {ETCD_RESTORE_FROM_ANNOTATION}: {snapshot} does not exist")]
    Missing { snapshot: String },
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: {snapshot} cannot be read from the object store \
         ({why}); nothing is touched, and it is tried again until the store answers or the annotation \
         is removed"
    )]
    StoreUnavailable { snapshot: String, why: String },
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: {snapshot} is not a snapshot of cluster {cluster}: {why}"
    )]
    OtherCluster {
        snapshot: String,
        cluster: String,
        why: String,
    },
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: {snapshot} fails the integrity check: {why}"
    )]
    Corrupt { snapshot: String, why: String },
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: {snapshot} is too large to restore through bootstrap \
         data: {size} bytes compressed and encoded, more than a Secret holds ({limit})"
    )]
    TooLarge {
        snapshot: String,
        size: usize,
        limit: usize,
    },
    #[error(
        "annotation {ETCD_RESTORE_FROM_ANNOTATION}: a restore from {running} is under way (Machine \
         {machine}); set the annotation back to it, or wait until it is done"
    )]
    AlreadyRunning { running: String, machine: String },
}

/// Checks that a Secret is a snapshot Secret of `cluster`: its type and its snapshot label.
pub fn check_secret(
    source: &Source,
    cluster: &str,
    type_: Option<&str>,
    snapshot_label: Option<&str>,
) -> Result<(), Refusal> {
    use kubeadm_api::meta::{ETCD_SNAPSHOT_LABEL, ETCD_SNAPSHOT_SECRET_TYPE};
    let other = |why: String| Refusal::OtherCluster {
        snapshot: source.to_string(),
        cluster: cluster.to_owned(),
        why,
    };
    if type_ != Some(ETCD_SNAPSHOT_SECRET_TYPE) {
        return Err(other(format!(
            "its type is {:?}, not {ETCD_SNAPSHOT_SECRET_TYPE:?}",
            type_.unwrap_or_default()
        )));
    }
    match snapshot_label {
        Some(label) if label == cluster => Ok(()),
        Some(label) => Err(other(format!(
            "its label {ETCD_SNAPSHOT_LABEL} names cluster {label}"
        ))),
        None => Err(other(format!("it has no label {ETCD_SNAPSHOT_LABEL}"))),
    }
}

/// Checks that a snapshot file lies in the directory where the manager writes this cluster's snapshots,
/// `<dir>/<namespace>/<cluster>/`. Without a snapshot directory no file is accepted.
pub fn check_file(
    path: &Path,
    snapshot_dir: Option<&Path>,
    namespace: &str,
    cluster: &str,
) -> Result<(), Refusal> {
    let source = Source::File(path.to_owned()).to_string();
    let Some(dir) = snapshot_dir else {
        return Err(Refusal::BadSource {
            value: source,
            rule:
                "the manager has no --etcd-snapshot-dir to read files from; use a snapshot Secret"
                    .into(),
        });
    };
    let own = dir.join(namespace).join(cluster);
    if path.parent() == Some(own.as_path()) {
        Ok(())
    } else {
        Err(Refusal::OtherCluster {
            snapshot: source,
            cluster: cluster.to_owned(),
            why: format!(
                "snapshots of {namespace}/{cluster} are in {}",
                own.display()
            ),
        })
    }
}

/// Checks that a snapshot object lies in the bucket and folder where the manager stores this cluster's
/// snapshots (`spec.etcdBackup`, whose endpoint and credentials read it), and is a snapshot, not its
/// manifest. Returns the manifest's name.
pub fn check_object(
    bucket: &str,
    key: &str,
    backup: Option<&kubeadm_api::controlplane::etcd_backup::EtcdBackup>,
    namespace: &str,
    cluster: &str,
) -> Result<String, Refusal> {
    let source = Source::Object {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
    };
    let bad = |rule: String| Refusal::BadSource {
        value: source.to_string(),
        rule,
    };
    let Some(backup) = backup else {
        return Err(bad(
            "restoring from object storage needs spec.etcdBackup: the store's endpoint and credentials \
             (and the key of encrypted snapshots)"
                .into(),
        ));
    };
    if bucket != backup.s3.bucket {
        return Err(bad(format!(
            "the bucket is not spec.etcdBackup.s3.bucket ({})",
            backup.s3.bucket
        )));
    }
    let folder = crate::etcd_backup::folder(backup, namespace, cluster);
    let (dir, file) = key.rsplit_once('/').unwrap_or(("", key));
    if dir != folder {
        return Err(Refusal::OtherCluster {
            snapshot: source.to_string(),
            cluster: cluster.to_owned(),
            why: format!("snapshots of {namespace}/{cluster} are in s3://{bucket}/{folder}/"),
        });
    }
    crate::etcd_backup::manifest_of(file)
        .map(|manifest| format!("{folder}/{manifest}"))
        .ok_or_else(|| {
            bad("it is not a snapshot object (`etcd-<time>.db` or `etcd-<time>.db.sealed`)".into())
        })
}

/// Length of the SHA-256 etcd appends to a snapshot it streams.
const HASH_LEN: usize = 32;
/// bbolt's magic number, in the meta page at the start of the database.
const BBOLT_MAGIC: u32 = 0xED0C_DAED;
/// Offset of the magic number: after the page header (id u64, flags u16, count u16, overflow u32).
const MAGIC_OFFSET: usize = 16;

/// What the integrity check found in a good snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Bytes of the database, without the appended hash.
    pub database_bytes: usize,
    /// The appended SHA-256, hex.
    pub sha256: String,
}

/// etcd's own integrity check of a snapshot taken through its API (what `etcdutl snapshot restore` does
/// unless told to skip it): a bbolt database followed by the SHA-256 of the database.
pub fn verify(source: &Source, snapshot: &[u8]) -> Result<Verified, Refusal> {
    let mut check = SnapshotCheck::default();
    check.update(snapshot);
    check.finish(source)
}

/// [`verify`] of a snapshot that arrives in pieces: memory stays the same whatever its size.
pub struct SnapshotCheck {
    /// The first bytes, until the magic number is in.
    head: Vec<u8>,
    /// The last bytes seen, which may be the appended hash.
    tail: Vec<u8>,
    hash: ring::digest::Context,
    hashed: usize,
}

impl Default for SnapshotCheck {
    fn default() -> Self {
        Self {
            head: Vec::with_capacity(MAGIC_OFFSET + 4),
            tail: Vec::with_capacity(2 * HASH_LEN),
            hash: ring::digest::Context::new(&ring::digest::SHA256),
            hashed: 0,
        }
    }
}

impl SnapshotCheck {
    /// The next bytes of the snapshot.
    pub fn update(&mut self, mut piece: &[u8]) {
        let wanted = (MAGIC_OFFSET + 4).saturating_sub(self.head.len());
        self.head
            .extend_from_slice(&piece[..wanted.min(piece.len())]);
        // All but the last HASH_LEN bytes seen are surely database.
        if piece.len() >= HASH_LEN {
            self.hash.update(&self.tail);
            self.hashed += self.tail.len();
            self.tail.clear();
            let (database, rest) = piece.split_at(piece.len() - HASH_LEN);
            self.hash.update(database);
            self.hashed += database.len();
            piece = rest;
        }
        self.tail.extend_from_slice(piece);
        let over = self.tail.len().saturating_sub(HASH_LEN);
        if over > 0 {
            self.hash.update(&self.tail[..over]);
            self.hashed += over;
            self.tail.drain(..over);
        }
    }

    /// Whether what came is a whole snapshot.
    pub fn finish(self, source: &Source) -> Result<Verified, Refusal> {
        let corrupt = |why: String| Refusal::Corrupt {
            snapshot: source.to_string(),
            why,
        };
        let total = self.hashed + self.tail.len();
        if total < MAGIC_OFFSET + 4 + HASH_LEN {
            return Err(corrupt(format!(
                "{total} bytes are too few for an etcd snapshot"
            )));
        }
        let magic = u32::from_le_bytes(
            self.head[MAGIC_OFFSET..MAGIC_OFFSET + 4]
                .try_into()
                .expect("four bytes"),
        );
        if magic != BBOLT_MAGIC {
            return Err(corrupt(
                "it does not start with a bbolt database (etcd's backend)".into(),
            ));
        }
        if self.hash.finish().as_ref() != self.tail.as_slice() {
            return Err(corrupt(
                "the SHA-256 at its end does not match its content (truncated or altered)".into(),
            ));
        }
        Ok(Verified {
            database_bytes: self.hashed,
            sha256: self.tail.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }
}

/// What a machine that restores from object storage is given, in the restore Secret's
/// [`ETCD_RESTORE_DOWNLOAD_KEY`]: where to fetch the snapshot object (a presigned URL, so the node holds
/// no credentials), how to check it, and the keys of that one object when it is sealed. One `name value`
/// per line; the bootstrap data's restore script reads it.
#[derive(Clone)]
pub struct Download {
    pub url: String,
    /// The object as stored: SHA-256 (hex).
    pub stored_sha256: String,
    /// The snapshot as etcd streamed it (what is restored): SHA-256 (hex).
    pub sha256: String,
    pub sealed: Option<crate::etcd_backup::sealed::ObjectKeys>,
}

impl fmt::Debug for Download {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Download")
            .field("sha256", &self.sha256)
            .field("sealed", &self.sealed.is_some())
            .finish_non_exhaustive()
    }
}

impl Download {
    /// The Secret's text.
    pub fn render(&self) -> String {
        use crate::etcd_backup::sealed::{HEADER_LEN, hex};
        let mut text = format!(
            "url {}\nstored-sha256 {}\nsha256 {}\n",
            self.url, self.stored_sha256, self.sha256
        );
        if let Some(keys) = &self.sealed {
            text += &format!(
                "sealed-header {HEADER_LEN}\ncipher-key {}\ncounter {}\nmac-key {}\n",
                hex(&keys.cipher),
                hex(&keys.counter),
                hex(&keys.mac)
            );
        }
        text
    }

    /// The same with another URL (signed again).
    pub fn with_url(text: &str, url: &str) -> String {
        text.lines()
            .map(|line| match line.split_once(' ') {
                Some(("url", _)) => format!("url {url}\n"),
                _ => format!("{line}\n"),
            })
            .collect()
    }
}

/// One control-plane Machine, as the restore sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    pub name: String,
    /// It carries [`ETCD_RESTORE_SNAPSHOT_ANNOTATION`]: the machine that restores etcd.
    pub restores: bool,
    pub deleting: bool,
    /// Our pre-terminate hook still holds it.
    pub holds_hook: bool,
    /// It has a Node and its etcd member answers as a healthy voter.
    pub ready: bool,
}

/// What the restore decision looks at.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The annotation's value.
    pub requested: &'a str,
    pub external_etcd: bool,
    /// The source recorded on the restore Secret, when it exists.
    pub staged: Option<&'a str>,
    pub machines: &'a [Machine],
}

/// The next step of a restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not done; nothing is touched.
    Refuse(Refusal),
    /// Read the snapshot, check it, and stage it in the restore Secret.
    Stage(Source),
    /// Delete every old control-plane machine.
    Delete(Vec<String>),
    /// Release our hook on these deleting machines: their etcd is replaced, so no member is removed.
    ReleaseHooks(Vec<String>),
    /// Wait until the old machines are gone (their etcd and API servers stopped).
    WaitForDeletion(Vec<String>),
    /// Create the machine that restores the snapshot.
    Create,
    /// Wait until the restoring machine's etcd member answers.
    WaitForMachine(String),
    /// Done: record it, drop the staged copy and the request.
    Finish { machine: String },
}

impl Step {
    /// What the step is about, for the `EtcdRestored` condition while it runs.
    pub fn describe(&self, source: &str) -> String {
        match self {
            Step::Refuse(refusal) => refusal.to_string(),
            Step::Stage(_) => format!("checking and staging the snapshot {source}"),
            Step::Delete(machines) => format!(
                "restoring {source}: deleting the old control-plane machines {}",
                machines.join(", ")
            ),
            Step::ReleaseHooks(machines) | Step::WaitForDeletion(machines) => format!(
                "restoring {source}: waiting for the old control-plane machines {} to be gone",
                machines.join(", ")
            ),
            Step::Create => format!("restoring {source}: creating the machine that restores it"),
            Step::WaitForMachine(machine) => {
                format!("restoring {source}: waiting for Machine {machine}'s etcd member to answer")
            }
            Step::Finish { machine } => {
                format!("restored {source} on Machine {machine}")
            }
        }
    }
}

/// The value of [`ETCD_RESTORED_ANNOTATION`](kubeadm_api::meta::ETCD_RESTORED_ANNOTATION) for a finished
/// restore: `<time> <source> Machine <machine>`.
pub fn record(at: impl fmt::Display, source: &str, machine: &str) -> String {
    format!("{at} {source} Machine {machine}")
}

/// What a finished restore's record says: the step that finished it, and the source.
pub fn recorded(record: &str) -> Option<(Step, &str)> {
    match record.split_whitespace().collect::<Vec<_>>()[..] {
        [_, source, "Machine", machine] => Some((
            Step::Finish {
                machine: machine.to_owned(),
            },
            source,
        )),
        _ => None,
    }
}

/// The next step of the restore `observed.requested` asks for.
pub fn next_step(observed: Observed<'_>) -> Step {
    if observed.external_etcd {
        return Step::Refuse(Refusal::ExternalEtcd);
    }
    let source = match Source::parse(observed.requested) {
        Ok(source) => source,
        Err(refusal) => return Step::Refuse(refusal),
    };
    let requested = source.to_string();
    // A restoring machine that is deleted (it failed) is an old one: another is made once it is gone.
    let restores = |m: &&Machine| m.restores && !m.deleting;
    let restoring = observed.machines.iter().find(restores);
    match (restoring, observed.staged) {
        (Some(machine), Some(staged)) if staged != requested => {
            return Step::Refuse(Refusal::AlreadyRunning {
                running: staged.to_owned(),
                machine: machine.name.clone(),
            });
        }
        // Nothing is deleted before the snapshot has been read, checked and staged.
        (None, staged) if staged != Some(requested.as_str()) => return Step::Stage(source),
        _ => {}
    }
    let old: Vec<&Machine> = observed.machines.iter().filter(|m| !restores(m)).collect();
    let names = |machines: &[&Machine]| machines.iter().map(|m| m.name.clone()).collect();
    let standing: Vec<&Machine> = old.iter().copied().filter(|m| !m.deleting).collect();
    if !standing.is_empty() {
        return Step::Delete(names(&standing));
    }
    let hooked: Vec<&Machine> = old.iter().copied().filter(|m| m.holds_hook).collect();
    if !hooked.is_empty() {
        return Step::ReleaseHooks(names(&hooked));
    }
    if !old.is_empty() {
        return Step::WaitForDeletion(names(&old));
    }
    match restoring {
        None => Step::Create,
        Some(machine) if machine.ready => Step::Finish {
            machine: machine.name.clone(),
        },
        Some(machine) => Step::WaitForMachine(machine.name.clone()),
    }
}

#[cfg(test)]
mod tests;
