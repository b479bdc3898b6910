//! Our Ignition against Flatcar's own libraries, the ones Cluster API's kubeadm bootstrap provider uses
//! (`hack/tools/cmd/ignition-check`): every Ignition config we render parses and validates as spec
//! 2.3.0, and our Container Linux Config transpiler gives the same config as Flatcar's, or refuses what
//! it refuses, with and without `strict`.

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use kubeadm_api::bootstrap::ignition::transpile;
use kubeadm_api::bootstrap::v1beta2::Format;
use kubeadm_bootstrap::render::Role;
use serde_json::Value;

fn tool() -> PathBuf {
    testenv::binaries::ignition_check().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `ignition-check <args>` on `input`: exit success, stdout, stderr.
fn run(args: &[&str], input: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(tool())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ignition-check runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_valid_ignition(name: &str, config: &[u8]) {
    let (ok, _, stderr) = run(&["validate"], config);
    assert!(
        ok,
        "{name}: Flatcar's Ignition refuses it: {stderr}\n{}",
        String::from_utf8_lossy(config)
    );
}

#[test]
fn every_role_renders_ignition_that_flatcar_validates_as_spec_2_3() {
    let mut spec = common::fixture_spec_with_format(Format::Ignition);
    spec.ignition.container_linux_config.additional_config = Some(CORPUS[0].to_owned());
    for role in [Role::Init, Role::ControlPlaneJoin, Role::WorkerJoin] {
        for version in [common::V1BETA3_VERSION, common::V1BETA4_VERSION] {
            let output = common::render_with(&spec, role, version).unwrap();
            assert_valid_ignition(&format!("{role:?} {version}"), &output);
        }
    }
    let goldens = std::fs::read_dir(common::golden_dir()).unwrap();
    let mut checked = 0;
    for entry in goldens {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".ignition.json") {
            assert_valid_ignition(&path.display().to_string(), &std::fs::read(&path).unwrap());
            checked += 1;
        }
    }
    assert!(checked >= 7, "only {checked} Ignition goldens found");
}

#[test]
fn flatcar_refuses_what_is_not_ignition_2_3() {
    let (ok, _, stderr) = run(&["validate"], br#"{"ignition":{"version":"3.3.0"}}"#);
    assert!(!ok, "{stderr}");
    let (ok, _, stderr) = run(
        &["validate"],
        br#"{"ignition":{"version":"2.3.0"},"storage":{"files":[{"filesystem":"root","path":"rel"}]}}"#,
    );
    assert!(!ok, "a relative path must be refused: {stderr}");
}

/// Container Linux Configs of the shapes found in infrastructure providers' templates (Azure's and
/// vSphere's Flatcar flavours, SCS), and edges of the transpiler.
const CORPUS: &[&str] = &[
    // An etcd data disk partitioned, formatted and mounted (Azure Flatcar).
    "storage:
  disks:
    - device: /dev/disk/azure/scsi1/lun0
      partitions:
        - number: 1
          label: etcd_disk
          size: 0
  filesystems:
    - name: etcd_disk
      mount:
        device: /dev/disk/azure/scsi1/lun0-part1
        format: ext4
        label: etcd_disk
        wipe_filesystem: true
        options: [-E, lazy_itable_init=1,lazy_journal_init=1]
systemd:
  units:
    - name: var-lib-etcddisk.mount
      enabled: true
      contents: |
        [Unit]
        Description=Mount etcd disk
        [Mount]
        What=/dev/disk/by-label/etcd_disk
        Where=/var/lib/etcddisk
        Type=ext4
        [Install]
        WantedBy=multi-user.target
    - name: kubeadm.service
      dropins:
        - name: 10-flatcar.conf
          contents: |
            [Unit]
            After=oem-cloudinit.service
            Requires=containerd.service
    - name: update-engine.service
      mask: true
    - name: locksmithd.service
      mask: true
",
    // Files, directories and links with owners, a remote verified file, a base64-free inline script.
    "storage:
  files:
    - path: /opt/bin/setup.sh
      filesystem: root
      mode: 0755
      user: {name: core}
      group: {id: 500}
      contents:
        inline: |
          #!/bin/bash
          echo \"<b> & 'c'\" > /tmp/x
    - path: /etc/hostname
      overwrite: true
      mode: 0644
      contents:
        inline: node-0
    - path: /opt/bin/crictl.tar.gz
      mode: 0644
      contents:
        remote:
          url: https://example.com/crictl.tar.gz
          compression: gzip
          verification:
            hash:
              function: sha512
              sum: a4abd4448c49562d828115d13a1fccea927f52b4d5459297f8b43e42da89238bc13626e43dcb38ddb082488927ec904fb42057443983e88585179d50551afe62
    - path: /etc/motd
      append: true
      mode: 0644
      contents:
        inline: more
  directories:
    - path: /opt/bin
      mode: 0755
  links:
    - path: /etc/systemd/system/multi-user.target.wants/containerd.service
      target: /usr/lib/systemd/system/containerd.service
    - path: /usr/local/bin/kubectl
      target: /opt/bin/kubectl
      hard: true
",
    // RAID, a path filesystem, GUIDs and partition arithmetic.
    "storage:
  disks:
    - device: /dev/sdb
      wipe_table: true
      partitions:
        - label: raid.1
          number: 1
          size: 1GiB512MiB
          start: 1MiB
          type_guid: raid_partition
          guid: 8a7a6e26-5e8f-4cca-a654-46215d4696ac
    - device: /dev/sdc
      partitions:
        - label: raid.2
          size: 1536MiB
          type_guid: a19d880f-05fc-4d3b-a006-743f0f84911e
  raid:
    - name: data
      level: raid1
      devices: [/dev/disk/by-partlabel/raid.1, /dev/disk/by-partlabel/raid.2]
      spares: 1
      options: [--assume-clean]
  filesystems:
    - name: data
      mount:
        device: /dev/md/data
        format: xfs
        label: DATA
        uuid: 8a7a6e26-5e8f-4cca-a654-46215d4696ac
    - name: oem
      path: /usr/share/oem
",
    // Users, groups, networkd, Ignition config merging and TLS, timeouts.
    "ignition:
  config:
    append:
      - source: https://example.com/extra.ign
        verification:
          hash:
            function: sha512
            sum: abcd
  timeouts:
    http_response_headers: 20
    http_total: 600
  security:
    tls:
      certificate_authorities:
        - source: data:,ca
passwd:
  users:
    - name: core
      ssh_authorized_keys: [ssh-ed25519 AAAAC3Nza core@example]
      groups: [sudo, docker]
      password_hash: $6$salt$hash
    - name: ops
      uid: 1500
      home_dir: /home/ops
      shell: /bin/bash
      no_create_home: true
      system: true
      primary_group: ops
      create:
        uid: 1500
        groups: [wheel]
  groups:
    - name: ops
      gid: 1500
      system: true
networkd:
  units:
    - name: 00-eth0.network
      contents: |
        [Match]
        Name=eth0
        [Network]
        DHCP=yes
      dropins:
        - name: 10-mtu.conf
          contents: |
            [Link]
            MTUBytes=1450
",
    // Flatcar helper sections.
    "docker:
  flags: [--log-level=warn, --iptables=false]
update:
  group: beta
  server: https://update.example.com/v1/update/
locksmith:
  reboot_strategy: off
  window_start: Sun 03:00
  window_length: 1h
",
    // Unknown keys: dropped without strict, refused with it.
    "storage:
  files:
    - path: /etc/a
      mode: 0644
      unknown_key: 1
      contents:
        inline: a
",
    // A file without mode, a directory without mode: warnings.
    "storage:
  files:
    - path: /etc/a
      contents:
        inline: a
  directories:
    - path: /opt/x
",
    // An enabled unit without [Install]: a warning.
    "systemd:
  units:
    - name: a.service
      enabled: true
      contents: |
        [Service]
        ExecStart=/bin/true
",
    // Errors: a bare number size, a sub-MiB size, a bad format, a relative path, a bad unit name,
    // a bad drop-in name, mount and path together, append with overwrite, local contents.
    "storage:\n  disks:\n    - device: /dev/sdb\n      partitions:\n        - size: 1024\n",
    "storage:\n  disks:\n    - device: /dev/sdb\n      partitions:\n        - size: 1536KiB\n",
    "storage:\n  filesystems:\n    - name: x\n      mount:\n        device: /dev/sdb\n        format: ext3\n",
    "storage:\n  files:\n    - path: etc/a\n      mode: 0644\n",
    "systemd:\n  units:\n    - name: kubelet\n",
    "systemd:\n  units:\n    - name: a.service\n      dropins:\n        - name: x.txt\n",
    "storage:\n  filesystems:\n    - name: x\n      path: /x\n      mount:\n        device: /dev/sdb\n        format: ext4\n",
    "storage:\n  files:\n    - path: /a\n      mode: 0644\n      append: true\n      overwrite: true\n",
    "storage:\n  files:\n    - path: /a\n      mode: 0644\n      contents:\n        local: a.txt\n",
    "storage:\n  files:\n    - path: /a\n      mode: \"0644\"\n",
    "storage: [\n",
];

#[test]
fn our_container_linux_config_transpiler_agrees_with_flatcars() {
    let mut compared = 0;
    for text in CORPUS {
        for strict in [false, true] {
            let ours = transpile(text, strict);
            let args: &[&str] = if strict {
                &["transpile", "--strict"]
            } else {
                &["transpile"]
            };
            let (theirs_ok, stdout, stderr) = run(args, text.as_bytes());
            match (&ours, theirs_ok) {
                (Ok(ours), true) => {
                    let ours = serde_json::to_value(&ours.config).unwrap();
                    let theirs: Value = serde_json::from_str(&stdout).unwrap();
                    assert_eq!(
                        ours, theirs,
                        "strict={strict}: the configs differ for\n{text}"
                    );
                    compared += 1;
                }
                (Err(_), false) => {}
                (Ok(_), false) => {
                    panic!("strict={strict}: Flatcar refuses, we accept:\n{text}\n{stderr}")
                }
                (Err(e), true) => {
                    panic!("strict={strict}: Flatcar accepts, we refuse ({e}):\n{text}")
                }
            }
        }
    }
    assert!(compared >= 8, "only {compared} configs compared");
}

/// The one deliberate difference: `etcd` and `flannel` configure Container Linux services Flatcar no
/// longer ships, and a kubeadm node must not run a second etcd; they are refused, naming why.
#[test]
fn etcd_and_flannel_sections_are_refused_with_the_reason() {
    for (text, reason) in [
        ("etcd:\n  name: x\n", "kubeadm runs etcd"),
        ("flannel:\n  etcd_prefix: /x\n", "install the CNI"),
    ] {
        let error = transpile(text, false).unwrap_err();
        assert!(error.to_string().contains(reason), "{error}");
        let (flatcar_ok, _, _) = run(&["transpile"], text.as_bytes());
        assert!(flatcar_ok, "Flatcar's transpiler takes {text}");
    }
}
