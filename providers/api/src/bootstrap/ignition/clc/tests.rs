use serde_json::json;

use super::*;

fn json_of(text: &str, strict: bool) -> Value {
    serde_json::to_value(transpile(text, strict).unwrap().config).unwrap()
}

#[test]
fn azure_flatcar_etcd_disk_shape_transpiles_to_ignition_2_3() {
    let text = "
storage:
  disks:
    - device: /dev/disk/azure/scsi1/lun0
      partitions:
        - number: 1
          label: etcd_disk
          size: 10GiB
          type_guid: linux_filesystem_data
        - start: 1GiB512MiB
  filesystems:
    - name: etcd_disk
      mount:
        device: /dev/disk/azure/scsi1/lun0-part1
        format: ext4
        label: etcd_disk
        wipe_filesystem: true
        options: [-E, lazy_itable_init=1]
  raid:
    - name: data
      level: raid1
      devices: [/dev/sdb, /dev/sdc]
systemd:
  units:
    - name: var-lib-etcddisk.mount
      enabled: true
      contents: |
        [Mount]
        What=/dev/disk/by-label/etcd_disk
        Where=/var/lib/etcddisk
        [Install]
        WantedBy=multi-user.target
";
    let config = json_of(text, true);
    assert_eq!(config["ignition"]["version"], "2.3.0");
    assert_eq!(
        config["storage"]["disks"],
        json!([{
            "device": "/dev/disk/azure/scsi1/lun0",
            "partitions": [
                {"label": "etcd_disk", "number": 1, "sizeMiB": 10240,
                 "typeGuid": "0fc63daf-8483-4772-8e79-3d69d8477de4"},
                {"startMiB": 1536}
            ]
        }])
    );
    assert_eq!(
        config["storage"]["filesystems"],
        json!([{
            "name": "etcd_disk",
            "mount": {"device": "/dev/disk/azure/scsi1/lun0-part1", "format": "ext4",
                      "label": "etcd_disk", "wipeFilesystem": true,
                      "options": ["-E", "lazy_itable_init=1"]}
        }])
    );
    assert_eq!(
        config["storage"]["raid"],
        json!([{"name": "data", "level": "raid1", "devices": ["/dev/sdb", "/dev/sdc"]}])
    );
    assert_eq!(config["systemd"]["units"][0]["enabled"], true);
}

#[test]
fn files_get_defaults_and_data_urls() {
    let config = json_of(
        "storage:\n  files:\n    - path: /etc/a\n      mode: 0600\n      contents:\n        inline: |\n          x y\n    - path: /etc/b\n      append: true\n      contents:\n        remote:\n          url: https://example.com/b\n          compression: gzip\n          verification:\n            hash:\n              function: sha512\n              sum: a4abd4448c49562d828115d13a1fccea927f52b4d5459297f8b43e42da89238bc13626e43dcb38ddb082488927ec904fb42057443983e88585179d50551afe62\n",
        false,
    );
    assert_eq!(
        config["storage"]["files"],
        json!([
            {"filesystem": "root", "path": "/etc/a", "mode": 384,
             "contents": {"source": "data:,x%20y%0A", "verification": {}}},
            {"filesystem": "root", "path": "/etc/b", "mode": 420, "append": true,
             "contents": {"source": "https://example.com/b", "compression": "gzip",
                          "verification": {"hash": "sha512-a4abd4448c49562d828115d13a1fccea927f52b4d5459297f8b43e42da89238bc13626e43dcb38ddb082488927ec904fb42057443983e88585179d50551afe62"}}}
        ])
    );
}

#[test]
fn unknown_keys_are_dropped_unless_strict() {
    let text = "systemd:\n  units:\n    - name: a.service\n      bogus: 1\n";
    let lenient = transpile(text, false).unwrap();
    assert_eq!(lenient.config.systemd.units[0].name, "a.service");
    assert_eq!(
        lenient.warnings[0].path.as_deref(),
        Some("systemd.units[0].bogus")
    );
    let refused = transpile(text, true).unwrap_err();
    assert_eq!(refused.path.as_deref(), Some("systemd.units[0].bogus"));
    assert!(refused.message.contains("strict"), "{refused}");
    // A file without a mode is a warning too.
    let no_mode = "storage:\n  files:\n    - path: /etc/a\n";
    assert!(transpile(no_mode, false).is_ok());
    assert_eq!(
        transpile(no_mode, true).unwrap_err().path.as_deref(),
        Some("storage.files[0].mode")
    );
}

#[test]
fn errors_name_the_key() {
    for (text, path, message) in [
        (
            "storage:\n  disks:\n    - device: /dev/sdb\n      partitions:\n        - size: 1024\n",
            "storage.disks[0].partitions[0].size",
            "unknown unit",
        ),
        (
            "storage:\n  disks:\n    - device: /dev/sdb\n      partitions:\n        - size: 1.5MiB\n",
            "storage.disks[0].partitions[0].size",
            "finest granularity",
        ),
        (
            "storage:\n  filesystems:\n    - name: x\n      mount:\n        device: /dev/sdb\n        format: ext3\n",
            "storage.filesystems[0].mount.format",
            "not a supported format",
        ),
        (
            "storage:\n  files:\n    - path: etc/a\n      mode: 0644\n",
            "storage.files[0].path",
            "absolute",
        ),
        (
            "systemd:\n  units:\n    - name: kubelet\n",
            "systemd.units[0].name",
            "not a unit name",
        ),
        ("etcd:\n  version: 3.5.0\n", "etcd", "kubeadm runs etcd"),
        (
            "storage:\n  files:\n    - path: /a\n      mode: \"0644\"\n",
            "storage.files[0].mode",
            "invalid type",
        ),
    ] {
        let found = transpile(text, false).unwrap_err();
        assert_eq!(found.path.as_deref(), Some(path), "{text}: {found}");
        assert!(found.message.contains(message), "{text}: {found}");
    }
}

#[test]
fn docker_update_and_locksmith_become_a_drop_in_and_update_conf() {
    let config = json_of(
        "docker:\n  flags: [--a, --b]\nupdate:\n  group: Stable\nlocksmith:\n  reboot_strategy: reboot\n",
        true,
    );
    assert_eq!(
        config["systemd"]["units"],
        json!([{"name": "docker.service", "enable": true, "dropins": [
            {"name": "20-clct-docker.conf",
             "contents": "[Service]\nEnvironment=\"DOCKER_OPTS=--a --b\""}]}])
    );
    assert_eq!(
        config["storage"]["files"][0]["contents"]["source"],
        super::data_url(b"GROUP=stable\nREBOOT_STRATEGY=\"reboot\"")
    );
}

#[test]
fn append_concatenates_and_takes_the_config_merging_of_the_addition() {
    let mut base = transpile(
        "systemd:\n  units:\n    - name: kubeadm.service\n      enabled: true\n",
        true,
    )
    .unwrap()
    .config;
    let addition = transpile(
        "ignition:\n  config:\n    append:\n      - source: https://example.com/x.ign\nsystemd:\n  units:\n    - name: kubeadm.service\n      dropins:\n        - name: 10-env.conf\n          contents: x\n",
        true,
    )
    .unwrap()
    .config;
    base.append(addition);
    let value = serde_json::to_value(&base).unwrap();
    assert_eq!(value["systemd"]["units"].as_array().unwrap().len(), 2);
    assert_eq!(
        value["ignition"]["config"]["append"][0]["source"],
        "https://example.com/x.ign"
    );
    assert_eq!(value["ignition"]["version"], "2.3.0");
    assert_eq!(value["ignition"]["security"], json!({"tls": {}}));
}
