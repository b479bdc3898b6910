//! The bootstrap data of a control-plane machine that restores etcd from a snapshot (the control plane
//! marks its KubeadmConfig with [`ETCD_RESTORE_SNAPSHOT_ANNOTATION`]): `kubeadm init`, with the snapshot
//! restored into etcd's data directory first. Added to the spec at render time, so that the
//! KubeadmConfig itself stays what the control plane's template says (and the machine up to date).

use kubeadm_api::bootstrap::v1beta2::{
    Encoding, File, FileSource, KubeadmConfigSpec, SecretFileSource,
};
pub use kubeadm_api::bootstrap::validation::{
    ETCD_RESTORE_DOWNLOAD_PATH, ETCD_RESTORE_SCRIPT_PATH, ETCD_RESTORE_SNAPSHOT_PATH,
};
pub use kubeadm_api::meta::{
    ETCD_RESTORE_DOWNLOAD_KEY, ETCD_RESTORE_SECRET_KEY, ETCD_RESTORE_SNAPSHOT_ANNOTATION,
};

/// kubeadm's default etcd data directory.
const DEFAULT_DATA_DIR: &str = "/var/lib/etcd";

/// The restore script. It asks kubeadm for the etcd manifest it would write on this node, so that the
/// restored member gets the name, peer URL and data directory etcd will run with; removes the manifest
/// again for `kubeadm init` to write; fetches a snapshot in object storage next to the data directory
/// (not into `/run`, a small tmpfs), checks its checksums and opens it when sealed (`openssl`, the
/// object's own keys); and restores with `etcdutl` (from PATH, else from kubeadm's etcd image through
/// containerd, pulled when the node does not hold it), its revision bumped where etcdutl can (3.5.13+). A data directory that already holds a
/// member is never overwritten.
const SCRIPT: &str = r#"#!/bin/sh
# Restores the etcd snapshot this machine was made with into etcd's data directory, before
# `kubeadm init` starts etcd: a new one-member etcd cluster holding the snapshot's data.
set -eu
snapshot=__SNAPSHOT__
download=__DOWNLOAD__
manifest=/etc/kubernetes/manifests/etcd.yaml
kubeadm init phase etcd local --config /run/kubeadm/kubeadm.yaml
flag() { sed -n "s/^ *- --$1=//p" "$manifest" | head -n 1; }
name=$(flag name)
peer=$(flag initial-advertise-peer-urls)
data=$(flag data-dir)
image=$(sed -n 's/^ *image: *//p' "$manifest" | head -n 1)
rm -f "$manifest"
if [ -e "$data/member" ]; then
  echo "etcd restore: $data already holds an etcd member; not restoring over it" >&2
  exit 1
fi
if [ -f "$download" ]; then
  # The snapshot is an object in the store: the URL, checksums and (when sealed) keys are given.
  field() { sed -n "s/^$1 //p" "$download"; }
  mkdir -p "$(dirname "$data")"
  snapshot="$(dirname "$data")/etcd-restore-snapshot.db"
  stored="$snapshot.stored"
  curl --fail --silent --show-error --retry 5 --retry-delay 2 --retry-all-errors \
    --output "$stored" "$(field url)"
  if ! echo "$(field stored-sha256)  $stored" | sha256sum -c --status -; then
    rm -f "$stored"
    echo "etcd restore: the downloaded snapshot is not what its manifest says" >&2
    exit 1
  fi
  header=$(field sealed-header)
  if [ -n "$header" ]; then
    body=$(( $(stat -c %s "$stored") - 32 ))
    want=$(tail -c 32 "$stored" | od -An -v -tx1 | tr -d ' \n')
    got=$(head -c "$body" "$stored" |
      openssl dgst -sha256 -mac HMAC -macopt "hexkey:$(field mac-key)" -r | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      rm -f "$stored"
      echo "etcd restore: the sealed snapshot fails authentication" >&2
      exit 1
    fi
    head -c "$body" "$stored" | tail -c +$((header + 1)) |
      openssl enc -d -aes-256-ctr -K "$(field cipher-key)" -iv "$(field counter)" > "$snapshot"
    rm -f "$stored"
  else
    mv "$stored" "$snapshot"
  fi
  if ! echo "$(field sha256)  $snapshot" | sha256sum -c --status -; then
    rm -f "$snapshot"
    echo "etcd restore: the opened snapshot is not what its manifest says" >&2
    exit 1
  fi
  rm -f "$download"
fi
if command -v etcdutl >/dev/null 2>&1; then
  run() { etcdutl "$@"; }
else
  # etcdutl from the etcd image kubeadm runs, through containerd; pulled only when the node does not
  # hold it already (air-gapped nodes get their images preloaded, and no registry answers them).
  if ! ctr -n k8s.io images ls -q "name==$image" | grep -q .; then
    ctr -n k8s.io images pull "$image" >/dev/null
  fi
  mounts="--mount type=bind,src=$(dirname "$data"),dst=$(dirname "$data"),options=rbind:rw"
  if [ "$(dirname "$snapshot")" != "$(dirname "$data")" ]; then
    mounts="--mount type=bind,src=$(dirname "$snapshot"),dst=$(dirname "$snapshot"),options=rbind:ro $mounts"
  fi
  # shellcheck disable=SC2086 # $mounts is flags
  run() { ctr -n k8s.io run --rm $mounts "$image" "etcd-restore-$$-$#" etcdutl "$@"; }
fi
set -- snapshot restore "$snapshot" --name "$name" --initial-cluster "$name=$peer" \
  --initial-advertise-peer-urls "$peer" --data-dir "$data"
# Clients of the lost cluster watch from newer revisions: start far past them, marked compacted, so
# that every watch and cache lists again instead of waiting for revisions that never come.
if run snapshot restore --help 2>&1 | grep -q -e --bump-revision; then
  set -- "$@" --bump-revision 1000000000 --mark-compacted
fi
run "$@"
rm -f "$snapshot"
"#;

/// What the restore Secret holds, by its keys: the snapshot itself, or where to download it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// [`ETCD_RESTORE_SECRET_KEY`]: the snapshot, gzip + base64.
    Inline,
    /// [`ETCD_RESTORE_DOWNLOAD_KEY`]: an object in the store, with its URL, checksums and keys.
    Download,
}

impl Form {
    /// The form of a restore Secret with these keys.
    pub fn of<'a>(mut keys: impl Iterator<Item = &'a str>) -> Self {
        if keys.any(|key| key == ETCD_RESTORE_DOWNLOAD_KEY) {
            Form::Download
        } else {
            Form::Inline
        }
    }
}

/// The command that runs the script: a restore that fails ends the boot there. cloud-init runs
/// `runcmd` as one script without `-e`, so a failed line alone would go on to `kubeadm init`, which
/// starts an empty etcd the control plane would take for the restored one.
fn restore_command() -> String {
    format!(
        "/bin/sh {ETCD_RESTORE_SCRIPT_PATH} || {{ echo 'etcd restore failed: the boot stops here' >&2; exit 1; }}"
    )
}

/// `spec` with what restores the snapshot in Secret `secret`: the snapshot and the script as files, the
/// script as the last command before kubeadm (after the user's, which may e.g. install etcdutl; its
/// failure stops the boot before kubeadm), and
/// kubeadm's preflight told that etcd's data directory is expected to be in use.
pub fn with_etcd_restore(spec: &KubeadmConfigSpec, secret: &str, form: Form) -> KubeadmConfigSpec {
    let mut spec = spec.clone();
    let (path, key, encoding) = match form {
        Form::Inline => (
            ETCD_RESTORE_SNAPSHOT_PATH,
            ETCD_RESTORE_SECRET_KEY,
            Some(Encoding::GzipBase64),
        ),
        Form::Download => (ETCD_RESTORE_DOWNLOAD_PATH, ETCD_RESTORE_DOWNLOAD_KEY, None),
    };
    spec.files.push(File {
        path: path.to_owned(),
        owner: Some("root:root".to_owned()),
        permissions: Some("0600".to_owned()),
        encoding,
        content_from: FileSource {
            secret: SecretFileSource {
                name: secret.to_owned(),
                key: key.to_owned(),
            },
        },
        ..File::default()
    });
    spec.files.push(File {
        path: ETCD_RESTORE_SCRIPT_PATH.to_owned(),
        owner: Some("root:root".to_owned()),
        permissions: Some("0700".to_owned()),
        content: Some(
            SCRIPT
                .replace("__SNAPSHOT__", ETCD_RESTORE_SNAPSHOT_PATH)
                .replace("__DOWNLOAD__", ETCD_RESTORE_DOWNLOAD_PATH),
        ),
        ..File::default()
    });
    spec.pre_kubeadm_commands.push(restore_command());
    let data_dir = spec
        .cluster_configuration
        .etcd
        .local
        .data_dir
        .clone()
        .unwrap_or_else(|| DEFAULT_DATA_DIR.to_owned());
    // kubeadm names the check after the path, `/` turned into `-`.
    let check = format!("DirAvailable-{}", data_dir.replace('/', "-"));
    let ignored = &mut spec
        .init_configuration
        .node_registration
        .ignore_preflight_errors;
    if !ignored.contains(&check) {
        ignored.push(check);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restore_runs_last_before_kubeadm_and_its_directory_check_is_ignored() {
        let mut spec = KubeadmConfigSpec::default();
        spec.pre_kubeadm_commands.push("install-tools".into());
        spec.cluster_configuration.etcd.local.data_dir = Some("/data/etcd".into());
        let restoring = with_etcd_restore(&spec, "c1-etcd-restore", Form::Inline);
        assert_eq!(
            restoring.pre_kubeadm_commands,
            [
                "install-tools",
                "/bin/sh /run/cluster-api/etcd-restore.sh || { echo 'etcd restore failed: the boot \
                 stops here' >&2; exit 1; }"
            ]
        );
        assert_eq!(
            restoring
                .init_configuration
                .node_registration
                .ignore_preflight_errors,
            ["DirAvailable--data-etcd"]
        );
        let snapshot = &restoring.files[0];
        assert_eq!(snapshot.path, ETCD_RESTORE_SNAPSHOT_PATH);
        assert_eq!(snapshot.encoding, Some(Encoding::GzipBase64));
        assert_eq!(snapshot.content_from.secret.name, "c1-etcd-restore");
        let script = restoring.files[1].content.as_deref().unwrap();
        assert!(script.contains("snapshot=/run/cluster-api/etcd-snapshot.db\n"));
        // Rendering twice (a retried render) does not list the check twice.
        let again = with_etcd_restore(&restoring, "c1-etcd-restore", Form::Inline);
        assert_eq!(
            again
                .init_configuration
                .node_registration
                .ignore_preflight_errors,
            ["DirAvailable--data-etcd"]
        );
    }

    #[test]
    fn the_restore_secret_says_by_its_keys_whether_it_holds_the_snapshot() {
        assert_eq!(Form::of(["snapshot.db.gz.b64"].into_iter()), Form::Inline);
        assert_eq!(Form::of(["download"].into_iter()), Form::Download);
        assert_eq!(Form::of(std::iter::empty()), Form::Inline);
        let spec = with_etcd_restore(
            &KubeadmConfigSpec::default(),
            "c1-etcd-restore",
            Form::Download,
        );
        let download = &spec.files[0];
        assert_eq!(download.path, ETCD_RESTORE_DOWNLOAD_PATH);
        assert_eq!(download.encoding, None);
        assert_eq!(download.content_from.secret.key, ETCD_RESTORE_DOWNLOAD_KEY);
        let script = spec.files[1].content.as_deref().unwrap();
        assert!(script.contains("download=/run/cluster-api/etcd-snapshot.download\n"));
    }
}
